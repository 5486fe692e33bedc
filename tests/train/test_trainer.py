"""The trainer end to end on the tiny model: the multi-step environment, metrics, reports, off-policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from tests.train.runs import metrics, run_config
from train.config import load_config
from train.trainer import train

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_multistep_run_logs_everything_and_reports(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    cfg = run_config(
        "first_responder_cpu.yaml",
        tiny_model_dir,
        tmp_path / "run",
        "max_steps=2",
        "rollout.prompts_per_step=2",
        "rollout.group_size=2",
        "rollout.max_tokens=8",
        "optim.micro_batch_size=2",
        "logging.eval_group_size=1",
        "logging.progress=false",
        "logging.sample_every=1",
    )
    result = train(cfg)
    run = tmp_path / "run"
    rows = metrics(run)
    steps = [r for r in rows if r["step"] in (1, 2) and "reward/mean" in r]
    assert len(steps) == 2
    for r in steps:
        # a random model never states its size-up: every group has zero variance, counted and dropped
        assert r["groups/zero_variance_fraction"] == 1.0 and r["groups/dropped"] == 2.0
        assert r["train/skipped"] == 1.0
        assert r["req/scene_safety"] == 0.0 and r["stop/incorrect"] == 1.0
        for key in ("diversity/distinct_fraction", "diversity/repetition_rate", "time/train_s", "turns/mean"):
            assert key in r
        assert r["time/rollout_generate_s"] > 0 and r["time/rollout_judge_s"] > 0
    assert result["before"]["rollouts"] == result["after"]["rollouts"] == 3  # 3 held-out scenarios x 1
    assert (run / "report.png").stat().st_size > 10_000
    assert (run / "eval_before" / "rollouts.jsonl").is_file() and (run / "eval_after" / "eval.png").is_file()
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert samples and "[assistant]" in samples[0]["conversation"]
    report = (run / "report.md").read_text()
    assert "Held-out mean reward did not rise" in report  # two steps of a random model learn nothing
    assert (
        "| repetition_rate (per reply) |" in report
        and "| requirement scene_safety passed | 0/3 | 0/3 |" in report
    )
    assert report.count("**before**") == report.count("**after**") == 3  # one sample per held-out scenario


@pytest.mark.slow
def test_off_policy_generation_runs_one_step_ahead(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    cfg = run_config(
        "tiny_test.yaml",
        tiny_model_dir,
        tmp_path / "run",
        "max_steps=3",
        "rollout.max_off_policy_steps=1",
        "env.eval_fraction=0",
    )
    train(cfg)
    rows = [r for r in metrics(tmp_path / "run") if "off_policy_steps" in r]
    assert [r["off_policy_steps"] for r in rows] == [0.0, 1.0, 1.0]
    assert all(r["train/loss_tokens"] > 0 for r in rows)


@pytest.mark.slow
def test_bf16_sampling_copy_and_autocast_train(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    cfg = run_config(
        "tiny_test.yaml",
        tiny_model_dir,
        tmp_path / "run",
        "max_steps=2",
        "env.eval_fraction=0",
        "rollout.inference_dtype=bfloat16",
        "model.mixed_precision=bf16",
    )
    train(cfg)
    rows = [r for r in metrics(tmp_path / "run") if "train/loss_tokens" in r]
    assert len(rows) == 2 and all(r["train/loss_tokens"] > 0 for r in rows)
    # the rollouts were sampled in bfloat16: their logprobs differ from the trainer's, and the
    # importance-sampling correction sees it
    assert any(r["train/is/ratio_min"] < 1.0 < r["train/is/ratio_max"] for r in rows)


def test_sampling_copy_follows_the_policy(tiny_model_dir: Path) -> None:
    import torch
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM

    from train.trainer import _copy_weights, _sampling_copy

    cfg = load_config(
        ROOT / "configs/train/tiny_test.yaml",
        [f"model.name_or_path={tiny_model_dir}", "rollout.inference_dtype=bfloat16"],
    )
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    policy = accelerator.prepare(AutoModelForCausalLM.from_pretrained(tiny_model_dir))
    sampler = _sampling_copy(cfg, accelerator, policy)
    assert sampler is not None and "forward" not in sampler.__dict__  # the copy runs without autocast
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in sampler.parameters())
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.5)

    def in_step() -> bool:
        pairs = zip(sampler.parameters(), policy.parameters(), strict=True)
        return all(torch.equal(s, p.bfloat16()) for s, p in pairs)

    assert not in_step()
    _copy_weights(policy, sampler)
    assert in_step()
    none = load_config(ROOT / "configs/train/tiny_test.yaml", [f"model.name_or_path={tiny_model_dir}"])
    assert _sampling_copy(none, accelerator, policy) is None
