"""The main job's GRPO step at GPU scale, on a randomly initialised model of a real architecture: in-loop
tokens/s, the step's time split, decode forward passes against their floor, rows per decode forward against
the rollouts in flight, peak GPU memory, host RSS and GPU memory per step and their slopes
(``train.memory_trend``), the training step's MFU, and a held-out evaluation of 48 multi-turn rollouts.

    .venv/bin/python benchmarks/rollout_step.py --arch tiny                    # CPU: the counts
    .venv/bin/python benchmarks/rollout_step.py --arch smollm2-135m --steps 5  # a CUDA host (scripts/gpu_check.sh)

The shape is the main job's (``configs/train/first_responder_cpu.yaml``): 8 scenarios x 8 rollouts a step,
up to 5 replies of at most 80 tokens, the progressive-reveal environment, rule judges, the local backend.
The model is built from its architecture's config with the tiny tokenizer's vocabulary, so nothing is
downloaded; random weights decode as fast as trained ones. A random model never satisfies a rule judge, so
every rollout would stop after one reply; by default (``--judge coin``) each requirement is instead judged
right with probability ``--p-right`` (seeded by the reply), so walks go as deep as a trained policy's.

Counts (hardware-independent; they predict the GPU figures):
- ``forwards_over_floor``: decode forward passes of the step over the floor, the passes a step needs when
  every rollout in flight decodes in one batch: the sum over turns of the longest reply at that turn;
- ``rows_over_in_flight``: mean live rows per decode forward over the mean rollouts in flight at those
  forwards (a rollout is in flight from its start to its end, judging included).

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:
    from rubrics.types import Rollout

ARCHS: dict[str, dict[str, Any]] = {
    "smollm2-135m": {
        "type": "llama",
        "hidden_size": 576,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "intermediate_size": 1536,
        "tie_word_embeddings": True,
    },
    "qwen2.5-1.5b": {
        "type": "qwen2",
        "hidden_size": 1536,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "intermediate_size": 8960,
        "tie_word_embeddings": True,
    },
}
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}
"""Dense bf16 peak of the GPUs the MFU is computed for (the name must appear in the device name)."""


def build_model(arch: str, out: Path) -> Path:
    """A randomly initialised model of ``arch`` with the tiny tokenizer, saved in ``out``: the same weights in
    every process (seed 0), so two runs sample the same rollouts."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from envs.models import build_tiny_model

    build_tiny_model(out)
    if arch == "tiny":
        return out
    spec = dict(ARCHS[arch])
    config = AutoConfig.for_model(spec.pop("type"), **spec)
    tiny = json.loads((out / "config.json").read_text())
    for key in ("vocab_size", "bos_token_id", "eos_token_id", "pad_token_id", "max_position_embeddings"):
        if key in tiny:
            setattr(config, key, tiny[key])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    for f in out.glob("*.safetensors"):
        f.unlink()
    model.save_pretrained(out, safe_serialization=True)
    return out


class _Counters:
    """Rollouts in flight, and (rows, rollouts in flight) at every decode forward of each training step's
    rollouts (evaluations are not counted). Counted outside the backend, so the same script measures any
    version of it."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.steps: list[list[tuple[int, int]]] = []
        self.active = False

    def install(self, p_right: float | None) -> None:
        from envs.environment import MultiTurnEnv
        from rubrics.judges.base import response_text
        from rubrics.judges.formats import JudgeResponse
        from rubrics.judges.rules import RulesJudge
        from train.orchestrator import Orchestrator

        original = MultiTurnEnv.rollout
        original_produce = Orchestrator._produce
        counters = self

        async def produce(orchestrator: Any, *args: Any) -> Any:
            counters.steps.append([])
            counters.active = True
            try:
                return await original_produce(orchestrator, *args)
            finally:
                counters.active = False

        Orchestrator._produce = produce  # type: ignore[method-assign]

        async def rollout(env: Any, example: Any, backend: Any) -> Any:
            counters.in_flight += 1
            try:
                return await original(env, example, backend)
            finally:
                counters.in_flight -= 1

        MultiTurnEnv.rollout = rollout  # type: ignore[method-assign]
        if p_right is None:
            return

        async def coin(self: Any, prompt: Any, completion: Any, truth: Any = None, state: Any = None) -> Any:
            text = response_text(completion)
            draw = zlib.crc32(f"{self.name}|{text}".encode()) / 2**32
            right = truth.get("answer") if isinstance(truth, dict) else None
            return JudgeResponse(answer=right if draw < p_right else None, reasoning="coin")

        RulesJudge.__call__ = coin  # type: ignore[method-assign]

    def hook(self, backend: Any) -> None:
        def pre(module: Any, args: Any, kwargs: Any) -> None:
            ids = kwargs.get("input_ids")
            if self.active and ids is not None and ids.shape[1] == 1:  # a decode forward, not a prefill
                self.steps[-1].append((int(ids.shape[0]), self.in_flight))

        backend.model.register_forward_pre_hook(pre, with_kwargs=True)


def floor_forwards(rollouts: list[Rollout]) -> int:
    """Decode forwards a step needs when all its rollouts decode together: per turn, the longest reply."""
    longest: dict[int, int] = {}
    for rollout in rollouts:
        for t, turn in enumerate(rollout.trajectory):
            longest[t] = max(longest.get(t, 0), len(turn["completion_ids"]))
    return sum(longest.values())


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


# over 60 lines: the benchmark's whole procedure (flags, runs, the JSON it prints) in the order it happens
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="tiny", choices=["tiny", *ARCHS])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=80)
    parser.add_argument("--judge", choices=["coin", "rules"], default="coin")
    parser.add_argument("--p-right", type=float, default=0.8)
    parser.add_argument("--no-eval", action="store_true", help="skip the held-out evaluations")
    parser.add_argument(
        "--eval-group", type=int, default=3, help="rollouts per held-out scenario (16 of them)"
    )
    parser.add_argument(
        "--out", default=None, help="work folder (default: a temporary one); gets result.json"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config override, applied last"
    )
    args = parser.parse_args()

    import torch

    import train.trainer as trainer_module
    from train.config_files import load_config
    from train.memory_trend import memory_slopes

    work = Path(args.out or tempfile.mkdtemp(prefix="rollout_step_"))
    shutil.rmtree(work, ignore_errors=True)
    model_dir = build_model(args.arch, work / "model")
    counters = _Counters()
    counters.install(args.p_right if args.judge == "coin" else None)
    real_rollout_backend = trainer_module.rollout_backend
    captured: dict[str, Any] = {}

    def rollout_backend(*a: Any, **k: Any) -> Any:
        backend = real_rollout_backend(*a, **k)
        counters.hook(backend)
        captured["backend"] = backend
        return backend

    trainer_module.rollout_backend = rollout_backend  # type: ignore[assignment]
    cuda = torch.cuda.is_available()
    overrides = [
        f"model.name_or_path={model_dir}",
        f"logging.output_dir={work / 'run'}",
        f"max_steps={args.steps}",
        f"rollout.prompts_per_step={args.prompts}",
        f"rollout.group_size={args.group}",
        f"rollout.max_tokens={args.max_tokens}",
        "optim.micro_batch_size=16" if cuda else "optim.micro_batch_size=4",
        f"model.gradient_checkpointing={'false' if cuda else 'true'}",
        "advantage.drop_zero_variance_groups=false",  # every step trains, whatever the coin says
        "warm_start.demonstrations=null",
        "rollout.guide=false",  # the sampled rollouts alone, as this benchmark has always counted them
        "logging.train_eval_sample=0",
        "logging.progress=false",
        "logging.wandb_mode=disabled",
        "logging.checkpoint_every=1000000",
        "rollout.max_errored_fraction=1.0",
    ]
    overrides.append(f"logging.eval_group_size={args.eval_group}")
    if args.no_eval:
        overrides += ["env.eval_scenarios=null", "env.extra_eval_scenarios={}", "env.eval_fraction=0"]
    overrides += args.set
    cfg = load_config(ROOT / "configs/train/first_responder_cpu.yaml", overrides)
    rollouts_per_step: list[list[Rollout]] = []
    import train.orchestrator as orchestrator_module

    real_scored_groups = orchestrator_module.scored_groups

    def scored_groups(groups: Any, *args: Any) -> Any:
        rollouts_per_step.append([r for g in groups for r in g])
        return real_scored_groups(groups, *args)

    orchestrator_module.scored_groups = scored_groups  # type: ignore[assignment]
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    result = trainer_module.train(cfg)
    wall = time.perf_counter() - start
    rows = [json.loads(x) for x in (work / "run" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [r for r in rows if "reward/mean" in r and r["step"] >= 1]
    n_params = sum(p.numel() for p in captured["backend"].policy.parameters())
    device = torch.cuda.get_device_name() if cuda else "cpu"
    peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in device), None)
    per_step = []
    for r, rollouts, forwards in zip(steps, rollouts_per_step, counters.steps, strict=False):
        n_forwards = len(forwards)
        rows_per_forward = sum(f[0] for f in forwards) / max(n_forwards, 1)
        in_flight_per_forward = sum(f[1] for f in forwards) / max(n_forwards, 1)
        trained_tokens = sum(len(x.sequence.ids) for x in rollouts if x.sequence is not None)
        floor = floor_forwards(rollouts)
        flops = 6.0 * n_params * trained_tokens
        per_step.append(
            {
                "step": r["step"],
                "reward": r["reward/mean"],
                "tokens_per_s_generate": r.get("tokens_per_s/generate"),
                "generate_and_score_s": r.get("time/generate_and_score_s"),
                "judge_s": r.get("time/rollout_judge_s"),
                "train_s": r.get("time/train_s"),
                "sync_s": r.get("time/sync_s"),
                "trim_s": r.get("time/trim_s", 0.0),
                "step_s": r["time/generate_and_score_s"]
                + r["time/train_s"]
                + r.get("time/trim_s", 0.0)
                + r["time/sync_s"],
                "turns_mean": r.get("turns/mean"),
                "decode_forwards": n_forwards,
                "floor_forwards": floor,
                "forwards_over_floor": n_forwards / max(floor, 1),
                "rows_per_forward": rows_per_forward,
                "live_rows_per_forward": r.get("decode/live_rows_per_forward"),  # the backend's own count
                "in_flight_per_forward": in_flight_per_forward,
                "rows_over_in_flight": rows_per_forward / max(in_flight_per_forward, 1e-9),
                "peak_rss_gib": r.get("memory/peak_rss_gib"),
                "rss_gib": r.get("memory/rss_gib"),
                "peak_gpu_gib": r.get("memory/peak_gpu_gib"),
                "gpu_allocated_gib": r.get("memory/gpu_allocated_gib"),
                "gpu_reserved_gib": r.get("memory/gpu_reserved_gib"),
                "mfu": flops / (r["time/train_s"] * peak) if peak and r.get("time/train_s") else None,
            }
        )
    evals = {k: result[k] for k in ("before", "after") if result.get(k)}
    out = {
        "benchmark": "rollout_step",
        "arch": args.arch,
        "parameters": n_params,
        "device": device,
        "torch": torch.__version__,
        "shape": {
            "prompts": args.prompts,
            "group": args.group,
            "max_tokens": args.max_tokens,
            "judge": args.judge,
        },
        "overrides": args.set,
        "wall_s": wall,
        "steps": per_step,
        # GiB per step of the memory held now, over the steps after the first (its one-time allocations)
        "memory_slopes": memory_slopes(steps, last=len(steps) - 1 if len(steps) > 2 else None),
        "forwards_over_floor_mean": _mean([s["forwards_over_floor"] for s in per_step]),
        "rows_over_in_flight_mean": _mean([s["rows_over_in_flight"] for s in per_step]),
        "step_s_mean": _mean([s["step_s"] for s in per_step]),
        "tokens_per_s_generate_mean": _mean([s["tokens_per_s_generate"] for s in per_step]),
        "eval": {
            k: {
                "rollouts": v.get("rollouts"),
                "wall_s": v.get("wall_s"),
                "tokens_per_s": v.get("tokens_per_s"),
            }
            for k, v in evals.items()
        },
    }
    (work / "result.json").write_text(json.dumps(out, indent=2, default=float))
    print(json.dumps(out, indent=2, default=float))


if __name__ == "__main__":
    main()
