"""The environment the trainer builds from a run config: held-out split, judge selection and endpoint."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from transformers import AutoTokenizer

from rubrics.multistep.judging import LLMRequirementJudge, RuleRequirementJudge
from train.config_files import load_config
from train.task import build_task

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs/train/first_responder_cpu.yaml"


def test_held_out_scenarios_are_not_trained_on(tiny_model_dir: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    names = lambda examples: {e.name for e in examples}  # noqa: E731
    # the main job: a held-out file of its own
    env, train, held = build_task(load_config(CONFIG), tokenizer)
    assert len(held) == 16 and len(train) == 48 and not names(train) & names(held)
    assert isinstance(env.multistep_rubric.judges[env.multistep_rubric.default_judge], RuleRequirementJudge)
    # safe scenes and unsafe ones in equal numbers: the strata the balanced sampler shares every step out to
    strata = Counter(env.stratum(e) for e in train)
    assert strata == {"scene_safety=0.0": len(train) // 2, "scene_safety=1.0": len(train) // 2}
    # one file split by env.eval_fraction
    _, train, held = build_task(load_config(CONFIG, SPLIT_ONE_FILE), tokenizer)
    assert len(held) == 3 and len(train) == 10 and not names(train) & names(held)


SPLIT_ONE_FILE = ["env.scenarios=configs/scenarios/first_responder.yaml", "env.eval_scenarios=null"]


def test_a_held_out_file_that_repeats_a_training_scenario_is_refused(
    tiny_model_dir: Path, monkeypatch
) -> None:
    monkeypatch.chdir(ROOT)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    same = ["env.eval_scenarios=configs/scenarios/first_responder_train.yaml"]
    with pytest.raises(
        ValueError, match=r"env.eval_scenarios: .*48 held-out scenario\(s\) also in env.scenarios"
    ):
        build_task(load_config(CONFIG, same), tokenizer)


@pytest.mark.parametrize("config", ["first_responder_cpu.yaml", "first_responder_gpu_vllm.yaml"])
def test_the_system_prompt_states_the_job_not_the_answer(config: str) -> None:
    """No rule that looks for words (any, all, regex) is satisfied by the system prompt itself: a model
    that repeats its instructions earns nothing."""
    from envs.multistep_env import DEFAULT_SYSTEM_PROMPT
    from rubrics.judges.matching import rule_matches
    from rubrics.multistep.rubric_io import load_rubric

    cfg = load_config(ROOT / "configs/train" / config)
    rubric = load_rubric(ROOT / cfg.env.rubric)
    prompt = cfg.env.system_prompt or DEFAULT_SYSTEM_PROMPT
    credited = [
        (req.name, answer)
        for req in rubric.requirements
        for answer, spec in req.rules.items()
        if {"any", "all", "regex"} & set(spec) and rule_matches(spec, prompt)
    ]
    assert credited == []
    assert rule_matches({"any": ["scene is safe"]}, "The scene is safe.")  # the check can see a phrase


def test_judge_endpoint_override(tiny_model_dir: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    cfg = load_config(
        CONFIG,
        ["env.judge=llm", "env.judge_base_url=http://judge-host:9000/v1", "env.judge_model=qwen-judge"],
    )
    env, _, _ = build_task(cfg, tokenizer)
    judge = env.multistep_rubric.judges["llm"]
    assert isinstance(judge, LLMRequirementJudge) and env.multistep_rubric.default_judge == "llm"
    assert (judge.endpoint.base_url, judge.endpoint.model) == ("http://judge-host:9000/v1", "qwen-judge")
    with pytest.raises(
        ValueError, match=r"env\.judge_base_url: the judge in use, 'rules', is not an LLM judge"
    ):
        build_task(load_config(CONFIG, ["env.judge_base_url=http://judge-host:9000/v1"]), tokenizer)


def test_a_synth_output_folder_names_its_scenarios(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """``rubric-grpo synth --out DIR`` writes DIR/scenarios.yaml: a run config may name DIR itself."""
    monkeypatch.chdir(ROOT)
    (tmp_path / "scenarios.yaml").write_bytes(
        (ROOT / "configs/scenarios/first_responder_heldout.yaml").read_bytes()
    )
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    _, _, held = build_task(load_config(CONFIG, [f"env.eval_scenarios={tmp_path}"]), tokenizer)
    assert len(held) == 16


def test_the_training_sample_takes_every_stratum_in_turn_and_is_fixed_by_the_seed(
    tiny_model_dir: Path, monkeypatch
) -> None:
    """``logging.train_eval_sample``: as many safe scenes as unsafe ones, the same sample for the same seed,
    another for another seed, and every training scenario when fewer than asked."""
    from train.task import training_sample

    monkeypatch.chdir(ROOT)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    cfg = load_config(CONFIG, ["logging.train_eval_sample=8"])
    env, train, _ = build_task(cfg, tokenizer)
    sample = training_sample(cfg, env, train)
    assert len(sample) == 8 and len({e.name for e in sample}) == 8
    assert Counter(env.stratum(e) for e in sample) == {"scene_safety=0.0": 4, "scene_safety=1.0": 4}
    assert [e.name for e in training_sample(cfg, env, train)] == [e.name for e in sample]
    other = load_config(CONFIG, ["logging.train_eval_sample=8", "seed=1"])
    assert {e.name for e in training_sample(other, env, train)} != {e.name for e in sample}
    every = load_config(CONFIG, ["logging.train_eval_sample=100"])
    assert len(training_sample(every, env, train)) == len(train)
    assert training_sample(load_config(CONFIG, ["logging.train_eval_sample=0"]), env, train) == []


def test_a_held_out_set_may_not_take_the_training_samples_name() -> None:
    with pytest.raises(ValueError, match=r"env.extra_eval_scenarios: 'train' names the sample of training"):
        load_config(
            CONFIG, ["env.extra_eval_scenarios={train: configs/scenarios/first_responder_heldout.yaml}"]
        )
