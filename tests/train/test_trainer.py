"""The trainer end to end on the tiny model: the multi-step environment, metrics, reports, off-policy."""

from __future__ import annotations

import json
import platform
import resource
from pathlib import Path

import pytest

pytest.importorskip("transformers")

import train.trainer as trainer_module
from tests.train.runs import SMALL_RUN, metrics, run_config
from train.trainer import train

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_credit_per_reply_is_logged_per_node_and_named_in_the_report(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(ROOT)
    cfg = run_config(
        "first_responder_cpu.yaml",
        tiny_model_dir,
        tmp_path / "run",
        "max_steps=1",
        *SMALL_RUN,
        "env.scenarios=configs/scenarios/first_responder.yaml",
        "env.eval_scenarios=null",
        "warm_start.demonstrations=null",
        "advantage.credit=turn",
    )
    train(cfg)
    run = tmp_path / "run"
    (step,) = [r for r in metrics(run) if r["step"] == 1 and "reward/mean" in r]
    # a random model fails the size-up: each rollout has one reply, at the root, with no signal
    assert step["credit/scene_safety/replies"] == 4.0 and step["credit/scene_safety/zero_frac"] == 1.0
    assert "Advantage estimator: credit per reply" in (run / "report.md").read_text()
    rollouts = [json.loads(line) for line in (run / "eval_after" / "rollouts.jsonl").read_text().splitlines()]
    assert all(r["reply_nodes"] == ["scene_safety"] for r in rollouts)


def test_multistep_run_logs_everything_and_reports(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    cfg = run_config(
        "first_responder_cpu.yaml",
        tiny_model_dir,
        tmp_path / "run",
        "max_steps=2",
        *SMALL_RUN,
        "rollout.sampler=balanced",  # one safe scene and one unsafe a step
        "logging.sample_every=1",
        "env.scenarios=configs/scenarios/first_responder.yaml",  # 3 of its 13 held out
        "env.eval_scenarios=null",
        "warm_start.demonstrations=null",  # the random model as it is: no reward signal (see test_warm_start.py)
    )
    events: list[str] = []  # the host's memory is trimmed (trim_host_memory: true) before the step reads it
    trim, memory = trainer_module.trim_host_memory, trainer_module.memory_gib
    monkeypatch.setattr(trainer_module, "trim_host_memory", lambda: events.append("trim") or trim())
    monkeypatch.setattr(trainer_module, "memory_gib", lambda: events.append("memory") or memory())
    result = train(cfg)
    assert events == ["trim", "memory"] * 2
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
        assert r["time/trim_s"] > 0  # a CPU run with reuse_freed_host_memory off trims every step
        assert r["time/rollout_generate_s"] > 0 and r["time/rollout_judge_s"] > 0
        assert r["sampler/stratum/scene_safety=0.0"] == r["sampler/stratum/scene_safety=1.0"] == 1.0
    last = json.loads((run / "checkpoints" / "step_000002" / "trainer_state.json").read_text())
    cursor = last["extra"]["cursor"]
    assert cursor["sampler"] == "balanced" and cursor["drawn"] == 4  # 2 steps of 2
    peak_now = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # this process ran the trainer
    peaks = [r["memory/peak_rss_gib"] for r in steps]
    assert 0.1 < peaks[0] <= peaks[1] <= peak_now  # a running maximum, in GiB
    # the memory held now, read when the step is logged: never far over the peak read just before it
    assert all(0.1 < r["memory/rss_gib"] <= r["memory/peak_rss_gib"] + 0.05 for r in steps)
    if platform.system() == "Linux":  # glibc's heap: its live blocks and the free space inside it
        assert all(0.01 < r["memory/heap_in_use_gib"] < r["memory/peak_rss_gib"] for r in steps)
        assert all(r["memory/heap_free_gib"] >= 0.0 for r in steps)
    assert result["before"]["rollouts"] == result["after"]["rollouts"] == 3  # 3 held-out scenarios x 1
    # one interval: summary.json's is the one logged for report.png (all rewards 0.0: a half-width of 0.0)
    after = json.loads((run / "eval_after" / "summary.json").read_text())
    logged = next(r["eval_final/reward_ci95"] for r in rows if "eval_final/reward_ci95" in r)
    assert after["reward_ci95"] == logged == 0.0
    assert (run / "report.png").stat().st_size > 10_000
    assert (run / "eval_before" / "rollouts.jsonl").is_file() and (run / "eval_after" / "eval.png").is_file()
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert samples and "[assistant]" in samples[0]["conversation"]
    report = (run / "report.md").read_text()
    assert "Held-out mean reward did not rise" in report  # two steps of a random model learn nothing
    assert "Advantage estimator: credit per episode (one advantage for every reply of a rollout)" in report
    assert (
        "| repetition_rate (per reply) |" in report
        and "| requirement scene_safety passed | 0/3 | 0/3 |" in report
    )
    assert report.count("**before**") == report.count("**after**") == 3  # one sample per held-out scenario
    # beside the trivial policies of the probe (probe.json, written before training)
    probe = {row["policy"]: row for row in json.loads((run / "probe.json").read_text())}
    assert (
        list(probe) == ["empty", "echo", "majority", "every_phrase", "ideal"]
        and probe["ideal"]["scenarios"] == 3
    )
    assert "## Held-out, beside the trivial policies" in report
    assert (
        "| trained | 0.000 ± 0.000 (3 on 3) |" in report
        and "| untrained | 0.000 ± 0.000 (3 on 3) |" in report
    )
    assert "- majority: " in report and "- ideal: " in report and "trained is below it" in report


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("inference_dtype", [None, "bfloat16"])
def test_off_policy_generation_runs_one_step_ahead(
    inference_dtype: str | None, tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """With a bf16 sampling copy this configuration deadlocked once: a batch generated ahead waited
    on the backend's one thread while the weights were copied. The copy now runs on that thread, under the
    lock, as one more job in its queue."""
    monkeypatch.chdir(ROOT)
    cfg = run_config(
        "tiny_test.yaml",
        tiny_model_dir,
        tmp_path / "run",
        "max_steps=3",
        "rollout.max_off_policy_steps=1",
        f"rollout.inference_dtype={inference_dtype or 'null'}",
        "env.eval_fraction=0",
    )
    train(cfg)
    rows = [r for r in metrics(tmp_path / "run") if "off_policy_steps" in r]
    # measured from the weight version stamped on every sample: a batch requested one step ahead is
    # generated before the update (1 step behind) or, if the update got to the backend's thread first,
    # after it (0); never more
    lags = [r["off_policy_steps"] for r in rows]
    assert lags[0] == 0.0 and set(lags[1:]) <= {0.0, 1.0}, lags
    assert all(0.0 <= r["off_policy_steps_mean"] <= r["off_policy_steps"] for r in rows)
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
    import asyncio

    import torch
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from envs.backends.local import LocalBackend
    from train.backend import PolicyWeights

    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    model = accelerator.prepare(AutoModelForCausalLM.from_pretrained(tiny_model_dir))
    weights = PolicyWeights(accelerator, model)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    backend = LocalBackend(weights.module, tokenizer, sampling_dtype="bfloat16")
    sampler = backend.model
    assert (
        sampler is not weights.module and "forward" not in sampler.__dict__
    )  # the copy runs without autocast
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in sampler.parameters())
    with torch.no_grad():
        for p in weights.module.parameters():
            p.add_(0.5)

    def in_step() -> bool:
        pairs = zip(sampler.parameters(), weights.module.parameters(), strict=True)
        return all(torch.equal(s, p.bfloat16()) for s, p in pairs)

    assert not in_step()
    asyncio.run(backend.sync_weights(weights, step=1))  # on the backend's thread, under its lock
    assert in_step()
    asyncio.run(backend.close())
    plain = LocalBackend(weights.module, tokenizer, sampling_dtype="float32")  # the policy's own dtype
    assert plain.model is weights.module


def _scripted_run(monkeypatch, tmp_path: Path, tiny_model_dir: Path, backend_factory, *overrides: str):
    """The multi-step main job's config on the tiny model, with ``backend_factory(tokenizer)`` as the run's
    backend (scripted replies: the policy is trained but not sampled)."""
    from train import trainer as trainer_module

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(
        trainer_module,
        "rollout_backend",
        lambda rollout, policy, tokenizer, model_dir, *_: backend_factory(tokenizer),
    )
    cfg = run_config(
        "first_responder_cpu.yaml",
        tiny_model_dir,
        tmp_path / "run",
        "max_steps=2",
        "env.eval_fraction=0",
        "rollout.inference_dtype=null",
        "rollout.prompts_per_step=2",
        "rollout.group_size=4",
        "rollout.max_tokens=16",
        "optim.micro_batch_size=4",
        "logging.progress=false",
        "warm_start.demonstrations=null",
        *overrides,
    )
    return train(cfg)


@pytest.mark.slow
def test_multistep_run_takes_real_gradient_steps(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """A scripted policy whose replies alternate between a passing and a failing size-up: groups on safe
    scenes have reward variance, so the trainer must take optimiser steps that move the weights."""
    import math

    import torch
    from safetensors.torch import load_file

    from tests.support.scripted_backend import CyclingBackend

    replies = ["The scene is safe. The patient is alert and oriented.", "I will look around first."]
    backends: list[CyclingBackend] = []

    def scripted(tokenizer):
        backends.append(CyclingBackend(tokenizer, replies))
        return backends[-1]

    overrides = ("rollout.prompts_per_step=4", "rollout.group_size=2", "optim.learning_rate=1e-2")
    _scripted_run(monkeypatch, tmp_path, tiny_model_dir, scripted, *overrides)
    rows = [r for r in metrics(tmp_path / "run") if "train/learning_rate" in r]
    assert len(rows) == 2 and backends[0].calls > 0
    stepped = [r for r in rows if "train/skipped" not in r]
    assert stepped, "no step had a group with reward variance"
    for r in stepped:
        assert r["groups/dropped"] < 4 and r["train/loss_tokens"] > 0
        assert (
            math.isfinite(r["train/loss"])
            and math.isfinite(r["train/grad_norm"])
            and r["train/grad_norm"] > 0
        )
    before = load_file(tiny_model_dir / "model.safetensors")
    after = load_file(next((tmp_path / "run").glob("checkpoints/*/model/model.safetensors")))
    changed = [name for name, tensor in before.items() if not torch.equal(tensor, after[name])]
    assert len(changed) > len(before) // 2  # AdamW moves every parameter that got a gradient


@pytest.mark.slow
def test_failed_rollouts_are_counted_and_the_run_goes_on(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    from tests.support.scripted_backend import FlakyBackend

    replies = ["The scene is safe. The patient is alert and oriented.", "I will look around first."]
    _scripted_run(monkeypatch, tmp_path, tiny_model_dir, lambda tok: FlakyBackend(tok, replies, fail_every=5))
    rows = [r for r in metrics(tmp_path / "run") if "train/learning_rate" in r]
    assert len(rows) == 2
    assert all(0 < r["errored/BackendError"] == r["errored_fraction"] < 0.5 for r in rows)
    assert all(r["stop/error"] == r["errored_fraction"] for r in rows)


@pytest.mark.slow
def test_too_many_failed_rollouts_stop_the_run_with_their_causes(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    from tests.support.scripted_backend import FlakyBackend
    from train.trainer import TooManyFailedRollouts

    with pytest.raises(TooManyFailedRollouts, match=r"step 1: 8 of 8 rollouts failed \(BackendError: 8\)"):
        _scripted_run(
            monkeypatch,
            tmp_path,
            tiny_model_dir,
            lambda tok: FlakyBackend(tok, ["x"], fail_every=1),
            "max_steps=1",
        )


def _reply_logprob(model, tokenizer, prompt_ids: list[int], reply: str) -> float:
    """Mean logprob of ``reply``'s tokens after ``prompt_ids`` (temperature 1)."""
    import torch

    reply_ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt_ids + reply_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
    return float(torch.log_softmax(logits, -1).gather(1, ids[0, len(prompt_ids) :, None]).mean())


@pytest.mark.slow
def test_the_gpu_configs_numerics_move_the_weights(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """The GPU config's precision and learning rate (fp32 weights, bf16 autocast, lr 1e-6) on the tiny
    model: nearly every weight changes, and the rewarded reply gains probability while the other loses."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from envs.chat import chat_ids
    from tests.support.scripted_backend import CyclingBackend
    from train import trainer as trainer_module
    from train.task import build_task

    good, bad = "The scene is safe. The patient is alert and oriented.", "I will look around first."
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(
        trainer_module, "rollout_backend", lambda r, p, tok, d, *_: CyclingBackend(tok, [good, bad])
    )
    cfg = run_config(
        "first_responder_gpu_vllm.yaml",
        tiny_model_dir,
        tmp_path / "run",
        "max_steps=2",
        "env.judge=rules",
        "env.eval_fraction=0",
        "rollout.prompts_per_step=4",
        "rollout.group_size=4",
        "logging.progress=false",
    )
    assert (cfg.model.dtype, cfg.model.mixed_precision, cfg.optim.learning_rate) == ("float32", "bf16", 1e-6)
    train(cfg)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    before = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    after = AutoModelForCausalLM.from_pretrained(next((tmp_path / "run").glob("checkpoints/*/model")))
    moved = total = 0
    for p0, p1 in zip(before.parameters(), after.parameters(), strict=True):
        moved += int((p0 != p1).sum())
        total += p0.numel()
    assert moved / total > 0.9, f"only {moved / total:.1%} of the weights changed"
    env, examples, _ = build_task(cfg, tokenizer)
    safe = next(e for e in examples if e.answer["scene_safety"]["answer"] == 1.0)
    prompt = chat_ids(tokenizer, env.initial_messages(safe))
    gain = {
        r: _reply_logprob(after, tokenizer, prompt, r) - _reply_logprob(before, tokenizer, prompt, r)
        for r in (good, bad)
    }
    assert gain[good] > 0 > gain[bad], gain


def test_pure_bf16_weights_at_a_small_learning_rate_are_refused(tiny_model_dir: Path, tmp_path: Path) -> None:
    from accelerate import Accelerator

    from train.policy import load_policy

    cfg = run_config(
        "tiny_test.yaml", tiny_model_dir, tmp_path / "run", "model.dtype=bfloat16", "optim.learning_rate=1e-6"
    )
    with pytest.raises(ValueError, match=r"model.dtype: bfloat16 .* round away"):
        load_policy(cfg, Accelerator(cpu=True))
    fine = run_config(
        "tiny_test.yaml", tiny_model_dir, tmp_path / "run", "model.dtype=bfloat16", "optim.learning_rate=1e-2"
    )
    assert load_policy(fine, Accelerator(cpu=True)).model is not None


def test_gradient_checkpointing_without_the_deprecated_call(tiny_model_dir: Path, tmp_path: Path) -> None:
    """``model.gradient_checkpointing`` turns on transformers' activation checkpointing with the current call,
    not ``gradient_checkpointing_enable``, which warns on every run that it is deprecated."""
    import warnings

    from accelerate import Accelerator

    from train.policy import load_policy

    cfg = run_config("tiny_test.yaml", tiny_model_dir, tmp_path / "run", "model.gradient_checkpointing=true")
    accelerator = Accelerator(cpu=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*gradient_checkpointing_enable.* is deprecated")
        model = accelerator.unwrap_model(load_policy(cfg, accelerator).model)
    # the property's name in transformers 5.25; older versions (the floor, 5.16.1) have only the old one
    assert getattr(model, "is_activation_checkpointing", None) or model.is_gradient_checkpointing


@pytest.mark.slow
def test_eval_every_draws_the_held_out_curve(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """``logging.eval_every``: a held-out evaluation every k steps, logged as ``eval/`` at its step, in its own
    folder, and plotted in the held-out panel of ``report.png``."""
    from train.report_png import panel_keys, read_metrics

    monkeypatch.chdir(ROOT)
    run = tmp_path / "run"
    cfg = run_config("tiny_test.yaml", tiny_model_dir, run, "max_steps=3", "logging.eval_every=1")
    train(cfg)
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows if "eval/reward_mean" in r] == [
        0,
        1,
        2,
    ]  # before training, then steps 1, 2
    assert [r["step"] for r in rows if "eval_final/reward_mean" in r] == [3]
    assert (run / "eval_step_1" / "summary.json").is_file() and (
        run / "eval_step_2" / "rollouts.jsonl"
    ).is_file()
    assert not (run / "eval_step_3").exists()  # the last step's evaluation is eval_after
    keys = sorted({k for r in rows for k in r})
    assert "eval/reward_mean" in panel_keys(keys)["Held-out evaluation"]
    assert (run / "report.png").stat().st_size > 10_000


@pytest.mark.slow
def test_greedy_evaluation(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """``logging.eval_temperature: 0``: held-out rollouts decode greedily (the rollouts of one scenario are
    alike), while training keeps sampling at ``rollout.temperature``."""
    monkeypatch.chdir(ROOT)
    run = tmp_path / "run"
    overrides = ("max_steps=1", "logging.eval_temperature=0", "logging.eval_group_size=3")
    train(run_config("tiny_test.yaml", tiny_model_dir, run, *overrides))
    by_prompt: dict[str, set[str]] = {}
    for line in (run / "eval_before" / "rollouts.jsonl").read_text().splitlines():
        row = json.loads(line)
        by_prompt.setdefault(json.dumps(row["prompt"]), set()).add(json.dumps(row["completion"]))
    assert by_prompt and all(len(completions) == 1 for completions in by_prompt.values())
    (step,) = [r for r in metrics(run) if "train/loss" in r]
    assert step["diversity/distinct_fraction"] > 0.25  # training rollouts still differ within a group


@pytest.mark.slow
def test_a_further_held_out_set_is_evaluated_and_logged_on_its_own(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """``env.extra_eval_scenarios``: the new-conditions set goes to its own folders and metrics, beside the
    held-out set, at every evaluation."""
    monkeypatch.chdir(ROOT)
    run = tmp_path / "run"
    cfg = run_config(
        "first_responder_cpu.yaml",
        tiny_model_dir,
        run,
        "max_steps=1",
        *SMALL_RUN,
        "logging.wandb_mode=disabled",
        "warm_start.demonstrations=null",
        "env.extra_eval_scenarios={conditions: configs/scenarios/first_responder_heldout_conditions.yaml}",
    )
    train(cfg)
    rows = metrics(run)
    assert [r["step"] for r in rows if "eval_conditions/reward_mean" in r] == [0]
    assert [r["step"] for r in rows if "eval_final_conditions/rollouts" in r] == [1]
    assert [r["eval_final_conditions/rollouts"] for r in rows if "eval_final_conditions/rollouts" in r] == [
        10
    ]
    assert [r["eval_final/rollouts"] for r in rows if "eval_final/rollouts" in r] == [16]
    for folder in ("eval_before_conditions", "eval_after_conditions", "eval_before", "eval_after"):
        assert (run / folder / "summary.json").is_file(), folder
    report = (run / "report.md").read_text()
    section = report[report.index("## Further held-out set: conditions") :]
    assert "trained minus untrained: " in section and "over 10 scenarios" in section
    # the trivial policies are probed on each set, and the trained model is set against them on both together
    conditions = {row["policy"] for row in json.loads((run / "probe_conditions.json").read_text())}
    assert {"empty", "majority"} <= conditions
    pooled = report[report.index("## Pooled over every held-out set (held-out, conditions)") :]
    for policy in ("untrained", "majority", "empty"):
        assert f"- {policy}: " in pooled and "over 26 scenarios" in pooled


def test_a_further_held_out_set_must_be_held_out(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    from envs.build import extra_held_out, multistep_inputs
    from train.config_files import ConfigError

    monkeypatch.chdir(ROOT)
    train_file = "configs/scenarios/first_responder_train.yaml"
    cfg = run_config(
        "first_responder_cpu.yaml",
        tiny_model_dir,
        tmp_path,
        f"env.extra_eval_scenarios={{again: {train_file}}}",
    )
    with pytest.raises(
        ValueError, match=r"^env.extra_eval_scenarios.again: .*48 held-out scenario\(s\) also in"
    ):
        extra_held_out(cfg.env, *multistep_inputs(cfg.env)[:2])
    with pytest.raises(ConfigError, match="'New' is not a set name"):
        run_config(
            "first_responder_cpu.yaml",
            tiny_model_dir,
            tmp_path,
            f"env.extra_eval_scenarios={{New: {train_file}}}",
        )
    with pytest.raises(ConfigError, match="there is none"):
        run_config(
            "first_responder_cpu.yaml",
            tiny_model_dir,
            tmp_path,
            "env.eval_scenarios=null",
            "env.eval_fraction=0",
            f"env.extra_eval_scenarios={{x: {train_file}}}",
        )


@pytest.mark.slow
def test_a_guided_run_trains_on_the_replayed_demonstrations(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """The main job's guided groups end to end on the tiny model: every group holds its scenario's ideal
    conversation (reward 1.0) beside rollouts that earn nothing, so no group is dropped, the step trains on
    the replayed tokens too, the step's reward counts only the sampled rollouts, and the training sample is
    evaluated and reported beside the held-out sets."""
    monkeypatch.chdir(ROOT)
    cfg = run_config(
        "first_responder_cpu.yaml",
        tiny_model_dir,
        tmp_path / "run",
        "max_steps=1",
        *SMALL_RUN,
        "rollout.guide=true",
        "logging.train_eval_sample=2",
        "warm_start.demonstrations=null",  # the guide reads rollout.guide_demonstrations
        # the tiny model's tokenizer spends more tokens than SmolLM2's (141 for the longest ideal reply, 64 in
        # SmolLM2's): room for the ideal replies
        "rollout.max_tokens=160",
        "env.max_total_tokens=4096",
        "env.extra_eval_scenarios={}",
    )
    train(cfg)
    run = tmp_path / "run"
    (step,) = [r for r in metrics(run) if r["step"] == 1 and "reward/mean" in r]
    assert step["guide/reward_mean"] == 1.0 and step["guide/advantage_mean"] > 0
    assert step["groups/dropped"] == 0.0 and step["rollouts"] == 4.0 and step["reward/mean"] < 1.0
    assert "## Training scenarios: a fixed sample of 2" in (run / "report.md").read_text()
    assert (run / "eval_after_train" / "summary.json").is_file() and (run / "probe_train.json").is_file()
