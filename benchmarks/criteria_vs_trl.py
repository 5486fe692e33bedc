"""Learning per wall time on per-prompt criteria: our trainer against TRL's ``GRPOTrainer``, from the same
untrained model, on the same prompts, reward and training wall time, in one run.

    .venv/bin/python benchmarks/criteria_vs_trl.py [--model smollm2|DIR] [--steps 8] [--eval-every 4]
        [--budget-s S] [--out DIR]

The task is ``configs/train/criteria_cpu.yaml``: first-aid questions, each graded against its own
rule-judged criteria (``envs.criteria.environment``); the held-out prompts are conditions no training
prompt has. Both arms get the same reward: our environment's grader (``RuleFirstGrader``) on the reply,
clipped or not as the config's ``env.clip_reward`` says (``envs.criteria.environment.criteria_reward``),
with the same system prompt.
Ours runs ``python -m train`` on the config (``--steps`` steps, a held-out evaluation every ``--eval-every``);
then TRL trains until it has spent the same training wall time (``--budget-s`` overrides it), evaluating every
``--eval-every`` steps. Matching settings: ``dapo`` loss, the config's ``loss.beta`` (k3 KL to the untrained
model), one update per batch, clipping 0.2 / 0.28, group-std scaled advantages, the config's learning rate,
prompts per step, group size, reply length and temperature, constant learning rate, AdamW betas (0.9, 0.99),
gradient clipping 1.0, bf16 autocast where the CPU computes bf16 natively (as ``mixed_precision: auto`` does
for ours).
Where they still differ: ours samples from a bf16 copy of the policy refreshed after every step (TRL from
the float32 policy under autocast), corrects for it by truncated importance sampling
(``loss.importance_sampling``; TRL has none with transformers generation) and drops groups whose rewards
are all equal (``advantage.drop_zero_variance_groups``: no gradient either way, but TRL counts their tokens
in the ``dapo`` normaliser); each draws the training prompts in its own order.

Each held-out evaluation samples 4 replies per held-out prompt at the config's evaluation temperature, the
same seed every time: ours through its own evaluation (``eval/reward_mean`` in ``metrics.jsonl``), TRL's
through ``model.generate`` on the policy. The x-axis is training wall seconds, evaluations excluded, in
both arms: ours sums ``time/wait_s + time/train_s + time/sync_s`` per step, TRL's the time between its
step callbacks. Each arm is its own subprocess, one after the other.

Prints one JSON object: per arm the curve ``[{step, train_s, heldout_reward}]``, the final held-out reward
with its 95% interval clustered by prompt, the final-minus-initial change paired by prompt (mean of the
per-prompt differences and its 95% t-interval), steps, training seconds and seconds per step; and the
machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.trainer_vs_trl import OFFLINE_ENV  # noqa: E402
from rubrics.intervals import clustered_mean_ci  # noqa: E402

CONFIG = ROOT / "configs" / "train" / "criteria_cpu.yaml"
EVAL_N = 4
"""Sampled replies per held-out prompt in every evaluation."""


def _task(spec: dict[str, Any]) -> tuple[Any, list[Any], list[Any]]:
    """The run config (with the spec's model), its training and held-out ``CriteriaExample``s."""
    from envs.build import criteria_inputs
    from train.config_files import load_config

    cfg = load_config(CONFIG, [f"model.name_or_path={spec['model']}", *spec.get("overrides", [])])
    train, held = criteria_inputs(cfg.env)
    return cfg, train, held


def _grade(held_or_train: dict[str, Any], example_id: str, text: str, clip: bool) -> float:
    """Our environment's reward for ``text`` as the reply to ``example_id`` (``env.clip_reward``: ``clip``)."""
    from envs.criteria.environment import criteria_reward
    from rubrics.criteria.autograders.mixed import RuleFirstGrader

    example = held_or_train[example_id]
    report = asyncio.run(RuleFirstGrader().grade(example.criteria, text, query=example.query))
    return criteria_reward(report.score, report.raw_score, example.positive_points, clip)


def _summary(per_prompt: dict[str, list[float]]) -> dict[str, float]:
    """Mean reward and its 95% interval clustered by prompt."""
    values = [v for vs in per_prompt.values() for v in vs]
    clusters = [k for k, vs in per_prompt.items() for _ in vs]
    mean, ci = clustered_mean_ci(values, clusters)
    return {"mean": mean, "ci95": ci}


def _paired(after: dict[str, list[float]], before: dict[str, list[float]]) -> dict[str, float]:
    """After minus before, paired by prompt: the mean of the per-prompt differences and its t-interval."""
    common = [k for k in after if k in before]
    diffs = [sum(after[k]) / len(after[k]) - sum(before[k]) / len(before[k]) for k in common]
    # one difference per prompt, each its own cluster: the ordinary paired t-interval (as paired_difference)
    mean, ci = clustered_mean_ci(diffs, common)
    return {"change": mean, "ci95": ci, "prompts": len(diffs)}


# -- the arms (each runs in its own subprocess) -------------------------------------------------------------


def run_ours(spec: dict[str, Any]) -> dict[str, Any]:
    """``python -m train`` on the config; the curve from its ``metrics.jsonl`` and held-out rollouts."""
    out = Path(spec["work"]) / "ours"
    cmd = [
        sys.executable, "-m", "train", str(CONFIG), f"model.name_or_path={spec['model']}",
        f"logging.output_dir={out}", f"max_steps={spec['steps']}", f"logging.eval_every={spec['eval_every']}",
        f"logging.eval_group_size={EVAL_N}", "logging.progress=false", *spec.get("overrides", []),
    ]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **OFFLINE_ENV}, capture_output=True, text=True)
    if proc.returncode != 0:  # the trainer's own error, not just its exit status
        raise RuntimeError(f"python -m train failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    total = time.perf_counter() - started
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    train_s, curve = 0.0, []
    for row in rows:
        if "time/train_s" in row:
            train_s += row["time/wait_s"] + row["time/train_s"] + row["time/sync_s"]
        for prefix in ("eval/", "eval_final/"):
            if f"{prefix}reward_mean" in row:
                curve.append(
                    {"step": row["step"], "train_s": train_s, "heldout_reward": row[f"{prefix}reward_mean"]}
                )

    def per_prompt(folder: str) -> dict[str, list[float]]:
        scores: dict[str, list[float]] = {}
        for line in (out / folder / "rollouts.jsonl").read_text().splitlines():
            state = json.loads(line)
            if not state.get("error"):
                scores.setdefault(state["info"]["scenario"], []).append(float(state["reward"]))
        return scores

    return {
        "curve": curve,
        "before": per_prompt("eval_before"),
        "after": per_prompt("eval_after"),
        "steps": spec["steps"],
        "train_s": train_s,
        "total_s_including_load_and_evals": total,
    }


# over 60 lines: TRL's settings are written out one by one, each matched to ours
def run_trl(spec: dict[str, Any]) -> dict[str, Any]:
    """TRL's GRPOTrainer until it has trained ``budget_s`` seconds, evaluated every ``eval_every`` steps."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from envs.criteria.environment import DEFAULT_SYSTEM_PROMPT
    from envs.models import resolve_model
    from envs.models.loading import load_causal_lm
    from train.distributed import cpu_has_native_bf16

    cfg, train, held = _task(spec)
    examples = {e.id: e for e in (*train, *held)}
    system = cfg.env.system_prompt or DEFAULT_SYSTEM_PROMPT
    model_dir = resolve_model(cfg.model.name_or_path)
    torch.manual_seed(cfg.seed)
    chat = lambda e: [{"role": "system", "content": system}, *e.messages()]  # noqa: E731
    dataset = Dataset.from_list([{"prompt": chat(e), "example_id": e.id} for e in train])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = load_causal_lm(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    rows = cfg.rollout.prompts_per_step * cfg.rollout.group_size
    micro = min(cfg.optim.micro_batch_size, rows)
    bf16 = cpu_has_native_bf16()

    def reward(prompts: list[Any], completions: list[Any], example_id: list[str], **kw: Any) -> list[float]:
        return [
            _grade(examples, k, c[-1]["content"], cfg.env.clip_reward)
            for c, k in zip(completions, example_id, strict=True)
        ]

    def evaluate() -> dict[str, list[float]]:
        torch.manual_seed(cfg.seed + 424_242)  # the same sampling noise every time
        scores: dict[str, list[float]] = {}
        model.eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            for e in held:
                ids = tokenizer.apply_chat_template(chat(e), add_generation_prompt=True, return_tensors="pt")
                ids = ids if isinstance(ids, torch.Tensor) else ids["input_ids"]
                out = model.generate(
                    ids, do_sample=True, temperature=cfg.logging.eval_temperature or 1.0, top_p=1.0, top_k=0,
                    max_new_tokens=cfg.rollout.max_tokens, num_return_sequences=EVAL_N,
                    pad_token_id=tokenizer.pad_token_id,
                )  # fmt: skip
                texts = tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)
                scores[e.id] = [_grade(examples, e.id, t, cfg.env.clip_reward) for t in texts]
        model.train()
        return scores

    args = GRPOConfig(
        output_dir=str(Path(spec["work"]) / "trl"), use_cpu=True, bf16=bf16, seed=cfg.seed,
        max_steps=10_000, per_device_train_batch_size=micro, gradient_accumulation_steps=rows // micro,
        num_generations=cfg.rollout.group_size, max_completion_length=cfg.rollout.max_tokens,
        temperature=cfg.rollout.temperature, top_p=1.0, top_k=0, loss_type="dapo", beta=cfg.loss.beta,
        num_iterations=1, epsilon=cfg.loss.epsilon, epsilon_high=cfg.loss.epsilon_high,
        scale_rewards="group", learning_rate=cfg.optim.learning_rate, lr_scheduler_type="constant",
        warmup_steps=0, adam_beta1=0.9, adam_beta2=0.99, weight_decay=0.0, max_grad_norm=1.0,
        gradient_checkpointing=False, logging_steps=1, save_strategy="no", report_to="none",
        disable_tqdm=True, dataloader_num_workers=0,
    )  # fmt: skip

    class Clock(TrainerCallback):  # type: ignore[misc]
        """Training seconds between step callbacks; an evaluation every ``eval_every`` steps, not timed."""

        def __init__(self) -> None:
            self.begin, self.train_s, self.curve = 0.0, 0.0, []
            self.before = evaluate()
            self.after: dict[str, list[float]] = {}
            self.curve.append({"step": 0, "train_s": 0.0, "heldout_reward": _summary(self.before)["mean"]})

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.begin = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.train_s += time.perf_counter() - self.begin
            done = self.train_s >= spec["budget_s"]
            if done or state.global_step % spec["eval_every"] == 0:
                self.after = evaluate()
                point = {"step": state.global_step, "train_s": self.train_s}
                self.curve.append({**point, "heldout_reward": _summary(self.after)["mean"]})
            control.should_training_stop = done

    clock = Clock()
    trainer = GRPOTrainer(
        model=model, reward_funcs=[reward], args=args, train_dataset=dataset, processing_class=tokenizer,
        callbacks=[clock],
    )  # fmt: skip
    trainer.train()
    steps = clock.curve[-1]["step"]
    return {"curve": clock.curve, "before": clock.before, "after": clock.after, "steps": steps,
            "train_s": clock.train_s}  # fmt: skip


# -- the driver ---------------------------------------------------------------------------------------------


def in_subprocess(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``kind``'s arm in a fresh interpreter; its result."""
    work = Path(spec["work"])
    spec_path, result_path = work / f"{kind}-spec.json", work / f"{kind}-result.json"
    spec_path.write_text(json.dumps(spec))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, str(spec_path), str(result_path)]
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **OFFLINE_ENV}, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return dict(json.loads(result_path.read_text()))


def _arm(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "curve": result["curve"],
        "heldout_before": _summary(result["before"]),
        "heldout_final": _summary(result["after"]),
        "final_minus_initial": _paired(result["after"], result["before"]),
        "steps": result["steps"],
        "train_s": round(result["train_s"], 1),
        "s_per_step": round(result["train_s"] / max(result["steps"], 1), 2),
    }


def _machine() -> dict[str, Any]:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        info = f.read()
    model = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "")
    flags = next((ln for ln in info.splitlines() if ln.startswith("flags")), "")
    bf16 = [f for f in ("avx512_bf16", "amx_bf16") if f" {f}" in flags]
    return {"cpu": model or platform.processor(), "cores": os.cpu_count(), "bf16_flags": bf16}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2", help="smollm2 or a local model folder")
    parser.add_argument("--steps", type=int, default=8, help="our trainer's steps (TRL gets the same time)")
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--budget-s", type=float, help="TRL's training seconds (default: what ours took)")
    parser.add_argument("--out", help="work folder (default: a temporary one)")
    parser.add_argument("--override", action="append", default=[], help="extra config override (repeatable)")
    parser.add_argument("--worker", nargs=3, metavar=("KIND", "SPEC", "RESULT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, spec_path, result_path = args.worker
        run = {"ours": run_ours, "trl": run_trl}[kind]
        Path(result_path).write_text(json.dumps(run(json.loads(Path(spec_path).read_text()))))
        return
    work = Path(args.out or tempfile.mkdtemp(prefix="criteria_vs_trl_"))
    work.mkdir(parents=True, exist_ok=True)
    spec = {"model": args.model, "steps": args.steps, "eval_every": args.eval_every, "work": str(work)}
    spec["overrides"] = args.override
    ours = in_subprocess("ours", spec)
    trl = in_subprocess("trl", {**spec, "budget_s": args.budget_s or ours["train_s"]})
    result = {"config": str(CONFIG.relative_to(ROOT)), "model": args.model, "machine": _machine()}
    result.update({"ours": _arm(ours), "trl": _arm(trl)})
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
