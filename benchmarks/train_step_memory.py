"""Peak memory and time of one training step of the main job's shape, under settings side by side.

Each setting runs in its own process (peak RSS is per process): the real SmolLM2-135M-Instruct, its
reference model (``loss.beta > 0``), ``--sequences`` sequences of ``--tokens`` tokens whose last
``--completion`` tokens are trained on, ``optim.micro_batch_size`` from the main job's config. Prints one
JSON object: per setting the RSS before the step, the peak during it and the step's wall time.

    .venv/bin/python benchmarks/train_step_memory.py
    .venv/bin/python benchmarks/train_step_memory.py --settings "" "model.gradient_checkpointing=true"
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
CONFIG = ROOT / "configs/train/first_responder_cpu.yaml"
DEFAULT_SETTINGS = ("", "model.gradient_checkpointing=true", "optim.micro_batch_size=4")


def one_step(overrides: list[str], sequences: int, tokens: int, completion: int) -> dict[str, object]:
    """Load the policy as the trainer does and time one ``train_step`` on a synthetic batch."""
    import torch
    from accelerate import Accelerator

    from train.batching import collate
    from train.config import load_config
    from train.distributed import peak_rss_gib, tune_host_allocator
    from train.step import train_step
    from train.trainer import load_policy

    cfg = load_config(CONFIG, ["model.mixed_precision='no'", *overrides])
    tune_host_allocator(cfg)  # as the trainer does on a CPU
    accelerator = Accelerator(cpu=True)
    policy = load_policy(cfg, accelerator)
    generator = torch.Generator().manual_seed(0)
    seqs = [
        {
            "ids": torch.randint(0, 49_000, (tokens,), generator=generator).tolist(),
            "loss_mask": [0] * (tokens - completion) + [1] * completion,
            "logprobs": [-2.0] * tokens,
        }
        for _ in range(sequences)
    ]
    advantages = [1.0 if i % 2 else -1.0 for i in range(sequences)]
    batch = collate(seqs, advantages, [False] * sequences, pad_token_id=0)
    before = peak_rss_gib()
    start = time.perf_counter()
    stats = train_step(
        policy.model, policy.ref_model, batch, cfg, accelerator, policy.optimizer, policy.scheduler
    )
    return {
        "rss_before_step_gib": round(before, 2),
        "peak_rss_gib": round(peak_rss_gib(), 2),
        "step_s": round(time.perf_counter() - start, 1),
        "loss": stats.get("loss"),
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
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(one_step(args.child.split(), args.sequences, args.tokens, args.completion)))
        return
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    results = {}
    for setting in args.settings:
        cmd = [sys.executable, __file__, "--child", setting, "--sequences", str(args.sequences)]
        cmd += ["--tokens", str(args.tokens), "--completion", str(args.completion)]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=True)
        results[setting or "main job config"] = json.loads(out.stdout.strip().splitlines()[-1])
    shape = {"sequences": args.sequences, "tokens": args.tokens, "completion": args.completion}
    print(
        json.dumps(
            {"machine": platform.processor() or platform.machine(), "batch": shape, "settings": results}
        )
    )


if __name__ == "__main__":
    main()
