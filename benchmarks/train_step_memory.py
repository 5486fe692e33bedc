"""Peak memory and time of one training step of the main job's shape, under settings side by side.

Each setting runs in its own process (peak RSS is per process): the real SmolLM2-135M-Instruct of
``--config`` (the main job's by default; float32 unless a setting says otherwise), its reference model
(``loss.beta > 0``), ``--sequences`` sequences of ``--tokens`` tokens whose last
``--completion`` tokens are trained on, ``optim.micro_batch_size`` from the main job's config. With
``--min-tokens`` the lengths vary as multi-turn rollouts do: each drawn uniformly (seeded) between it and
``--tokens``, the last ``min(--completion, length // 2)`` tokens trained on. With ``--group-size`` G the
rows come in groups of G replies to one prompt, as a GRPO step's do: each row takes its group's first row's
prompt (the tokens before its trained ones; ``optim.share_prefix`` runs it once). Prints one JSON object: per
setting the RSS before the step, the peak during it, the step's wall time, and its micro-batches, forward
calls and padded token positions (``train/micro_batches``, ``train/forwards``, ``train/padded_tokens``).

    .venv/bin/python benchmarks/train_step_memory.py
    .venv/bin/python benchmarks/train_step_memory.py --settings "" "model.gradient_checkpointing=true"
    .venv/bin/python benchmarks/train_step_memory.py --sequences 16 --min-tokens 200 --tokens 900 \
        --settings "" "optim.micro_batch_tokens=2048"
    .venv/bin/python benchmarks/train_step_memory.py --config configs/train/criteria_cpu.yaml \
        --sequences 32 --tokens 246 --completion 96 --steps 3 --settings "" "model.mixed_precision=auto"
    .venv/bin/python benchmarks/train_step_memory.py --config configs/train/criteria_cpu.yaml \
        --sequences 32 --tokens 246 --completion 96 --group-size 8 --settings "" "optim.share_prefix=true"
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's packages, not an installed one's (a git worktree's own code)
CONFIG = ROOT / "configs/train/first_responder_cpu.yaml"
DEFAULT_SETTINGS = ("", "model.gradient_checkpointing=true", "optim.micro_batch_size=4")


def one_step(
    overrides: list[str],
    sequences: int,
    tokens: int,
    completion: int,
    min_tokens: int | None = None,
    config: Path = CONFIG,
    steps: int = 1,
    group_size: int = 1,
) -> dict[str, object]:
    """Load the policy as the trainer does and time ``steps`` ``train_step`` calls on a synthetic batch."""
    import torch

    from rubrics.types import TokenSequence
    from train.batching import collate
    from train.config_files import load_config
    from train.distributed import make_accelerator, peak_rss_gib, tune_host_allocator
    from train.policy import load_policy
    from train.step import train_step

    cfg = load_config(config, ["model.mixed_precision='no'", *overrides])
    tune_host_allocator(cfg)  # as the trainer does on a CPU
    accelerator = make_accelerator(cfg)
    policy = load_policy(cfg, accelerator)
    generator = torch.Generator().manual_seed(0)
    lengths = [tokens] * sequences
    if min_tokens is not None:
        lengths = torch.randint(min_tokens, tokens + 1, (sequences,), generator=generator).tolist()
    trained = [completion if min_tokens is None else min(completion, n // 2) for n in lengths]
    seqs = [
        {
            "ids": torch.randint(0, 49_000, (n,), generator=generator).tolist(),
            "loss_mask": [0] * (n - c) + [1] * c,
            "logprobs": [-2.0] * n,
        }
        for n, c in zip(lengths, trained, strict=True)
    ]
    for i, seq in enumerate(seqs):  # replies to their group's first prompt
        head = seqs[i - i % group_size]
        prompt = head["loss_mask"].index(1)
        reply = seq["ids"][seq["loss_mask"].index(1) :]
        seq["ids"] = head["ids"][:prompt] + reply
        seq["loss_mask"] = [0] * prompt + [1] * len(reply)
        seq["logprobs"] = [-2.0] * len(seq["ids"])
    lengths = [len(seq["ids"]) for seq in seqs]
    advantages = [1.0 if i % 2 else -1.0 for i in range(sequences)]
    rows = [TokenSequence(s["ids"], s["loss_mask"], s["logprobs"]) for s in seqs]
    batch = collate(rows, advantages, [False] * sequences, pad_token_id=0)
    before = peak_rss_gib()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        stats = train_step(
            policy.model, policy.ref_model, batch, cfg, accelerator, policy.optimizer, policy.scheduler
        )
        times.append(round(time.perf_counter() - start, 2))
    return {
        "rss_before_step_gib": round(before, 2),
        "peak_rss_gib": round(peak_rss_gib(), 2),
        "step_s": times[0] if steps == 1 else times,
        "loss": stats.get("loss"),
        "micro_batches": stats.get("micro_batches"),
        "forwards": stats.get("forwards"),
        "padded_tokens": stats.get("padded_tokens"),
        "real_tokens": sum(lengths),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--settings", nargs="*", default=list(DEFAULT_SETTINGS), help="space-separated overrides"
    )
    parser.add_argument("--sequences", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=600)
    parser.add_argument("--completion", type=int, default=200)
    parser.add_argument("--min-tokens", type=int, help="draw each length between this and --tokens")
    parser.add_argument("--config", type=Path, default=CONFIG, help="the run config the settings change")
    parser.add_argument("--steps", type=int, default=1, help="steps to time, one after another")
    parser.add_argument("--group-size", type=int, default=1, help="replies to one prompt, in a row")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child = one_step(
            args.child.split(),
            args.sequences,
            args.tokens,
            args.completion,
            args.min_tokens,
            args.config,
            args.steps,
            args.group_size,
        )
        print(json.dumps(child))
        return
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    results = {}
    for setting in args.settings:
        cmd = [sys.executable, __file__, "--child", setting, "--sequences", str(args.sequences)]
        cmd += ["--tokens", str(args.tokens), "--completion", str(args.completion)]
        cmd += ["--min-tokens", str(args.min_tokens)] if args.min_tokens is not None else []
        cmd += [
            "--config",
            str(args.config),
            "--steps",
            str(args.steps),
            "--group-size",
            str(args.group_size),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=True)
        results[setting or "the config"] = json.loads(out.stdout.strip().splitlines()[-1])
    shape = {
        "sequences": args.sequences,
        "tokens": args.tokens,
        "min_tokens": args.min_tokens,
        "completion": args.completion,
        "group_size": args.group_size,
    }
    print(
        json.dumps(
            {
                "machine": platform.processor() or platform.machine(),
                "config": str(args.config.resolve().relative_to(ROOT)),
                "batch": shape,
                "settings": results,
            }
        )
    )


if __name__ == "__main__":
    main()
