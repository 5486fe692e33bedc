"""``envs.build``: the one environment builder and the one backend factory, and ``rubric-grpo eval``'s job
built on them (the trainer's use is in ``tests/train/test_task.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

from envs.backends.base import SamplingParams
from envs.backends.local import LocalBackend
from envs.backends.vllm import VllmBackend
from envs.build import make_backend, make_env
from envs.config import EnvConfig
from envs.environment import SingleTurnEnv
from envs.evaluation.job import EvalJob, run_job
from envs.multistep_env import MultiStepMultiTurnEnv

ROOT = Path(__file__).resolve().parents[2]
RUBRIC = str(ROOT / "configs/rubrics/first_responder.yaml")
SCENARIOS = str(ROOT / "configs/scenarios/first_responder.yaml")


def test_make_env_builds_either_environment_with_its_split(tiny_model_dir: Path) -> None:
    _, tokenizer = make_backend("local", tiny_model_dir)
    sampling = SamplingParams(max_tokens=8)
    env, train, held = make_env(EnvConfig(rubric=RUBRIC, scenarios=SCENARIOS), tokenizer, sampling)
    # 13 scenarios, a quarter held out: round(3.25) = 3
    assert isinstance(env, MultiStepMultiTurnEnv) and (len(train), len(held)) == (10, 3)
    assert env.sampling == sampling and len(env.dataset) == 13
    single = EnvConfig(
        type="single_turn",
        rubric="rubrics.ready_made:toy_vowels",
        data=str(ROOT / "configs/data/toy_prompts.jsonl"),
        eval_fraction=0,
    )
    env, train, held = make_env(single, tokenizer, sampling)
    assert isinstance(env, SingleTurnEnv) and held == [] and train == env.dataset


def test_make_backend_local_vllm_or_neither(tiny_model_dir: Path) -> None:
    local, tokenizer = make_backend("local", tiny_model_dir)
    assert isinstance(local, LocalBackend) and local.tokenizer is tokenizer and local.max_batch_rows == 64
    around, same = make_backend(
        "local", tiny_model_dir, policy=local.model, tokenizer=tokenizer, max_batch_rows=8
    )
    assert isinstance(around, LocalBackend) and around.policy is local.model and same is tokenizer
    assert around.max_batch_rows == 8
    vllm, vllm_tokenizer = make_backend("vllm", tiny_model_dir, vllm_urls=["http://127.0.0.1:1"])
    assert isinstance(vllm, VllmBackend) and vllm.model == str(tiny_model_dir)
    assert vllm_tokenizer.encode("hello") == tokenizer.encode("hello")  # the model folder's
    with pytest.raises(ValueError, match="backend must be 'local', 'vllm' or 'vllm_colocate', got 'onnx'"):
        make_backend("onnx", tiny_model_dir)


def test_an_eval_job_is_an_environment_and_the_evaluation_s_own_fields() -> None:
    flags = {"rubric": RUBRIC, "scenarios": SCENARIOS, "seed": 3, "n": 2, "split": None, "no_progress": True}
    job = EvalJob.from_flags(flags)
    assert job.env == EnvConfig(
        rubric=RUBRIC, scenarios=SCENARIOS, split_seed=3, max_turns=6, max_total_tokens=2048
    )
    assert (job.n, job.split, job.backend) == (2, "all", "local")
    with pytest.raises(ValueError, match=r"^--eval-fraction: Input should be less than 1$"):
        EvalJob.from_flags({**flags, "eval_fraction": 1.0})


async def test_an_eval_job_names_the_flag_of_a_bad_setting(tmp_path: Path) -> None:
    job = EvalJob.from_flags({"rubric": RUBRIC, "scenarios": SCENARIOS, "judge": "gpt", "out": str(tmp_path)})
    with pytest.raises(
        ValueError, match=r"^--judge: 'gpt' is not one of the rubric's judges \(rules, llm\)$"
    ):
        await run_job(job, progress=False)


def test_the_config_judge_settings_are_a_judge_endpoint() -> None:
    from rubrics.judges.endpoint import JudgeEndpoint

    defaults = EnvConfig(type="criteria", data="d.jsonl")
    endpoint_defaults = JudgeEndpoint.defaults()
    assert defaults.judge_concurrency == endpoint_defaults["max_concurrency"]
    assert defaults.judge_timeout_s == endpoint_defaults["timeout_s"]
    assert defaults.judge_max_attempts == endpoint_defaults["max_attempts"]
    assert defaults.criteria_judge_endpoint() is None and defaults.judge_overrides() == {}
    cfg = EnvConfig(
        type="criteria",
        data="d.jsonl",
        judge_base_url="http://judge-host:8001/v1",
        judge_model="judge",
        judge_concurrency=128,
        judge_timeout_s=5.0,
        judge_max_attempts=2,
    )
    assert cfg.criteria_judge_endpoint() == JudgeEndpoint(
        base_url="http://judge-host:8001/v1",
        model="judge",
        max_concurrency=128,
        timeout_s=5.0,
        max_attempts=2,
    )
    assert cfg.judge_overrides() == {"base_url": "http://judge-host:8001/v1", "model": "judge"}
