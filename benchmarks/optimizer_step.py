"""AdamW's step over a real model's parameters: torch's ``foreach`` implementation (what the trainer used
before) against its fused kernel (``fused=True``: what ``train.policy.adamw`` picks now, and TRL's default
through transformers' ``adamw_torch_fused``), interleaved, with gradient clipping as a training step runs it.

    .venv/bin/python benchmarks/optimizer_step.py [--model smollm2] [--steps 6] [--threads 0]

Both arms start from the same weights and moments and take the same seeded random gradients, in turns
(foreach, fused, foreach, ...), so a machine that speeds up or slows down mid-run touches both. Prints one
JSON object: seconds per step of each (median and every step, the first a warm-up), their ratio, and the
largest absolute difference between the two arms' weights after the last step (the same update up to float
rounding).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2", help="smollm2, or a local model folder")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()

    import torch

    from envs.models import prepare_smollm2
    from envs.models.loading import load_causal_lm
    from train.config import TrainConfig
    from train.distributed import tune_host_allocator

    tune_host_allocator(TrainConfig())  # as the trainer runs
    if args.threads:
        torch.set_num_threads(args.threads)
    folder = prepare_smollm2() if args.model == "smollm2" else Path(args.model)
    arms = {}
    for fused in (False, True):
        model = load_causal_lm(folder, dtype=torch.float32)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, fused=fused)
        arms["fused" if fused else "foreach"] = (params, optimizer)
    seconds: dict[str, list[float]] = {name: [] for name in arms}
    for step in range(args.steps):
        for name, (params, optimizer) in arms.items():
            generator = torch.Generator().manual_seed(step)
            for p in params:
                p.grad = torch.randn(p.shape, generator=generator) * 1e-3
            began = time.perf_counter()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            seconds[name].append(time.perf_counter() - began)
            optimizer.zero_grad(set_to_none=True)
    gap = max(
        float((a.detach() - b.detach()).abs().max())
        for a, b in zip(arms["foreach"][0], arms["fused"][0], strict=True)
    )
    median = {name: statistics.median(s[1:] or s) for name, s in seconds.items()}
    print(
        json.dumps(
            {
                "model": str(folder),
                "parameters": sum(p.numel() for p in arms["fused"][0]),
                "threads": torch.get_num_threads(),
                "steps": args.steps,
                "foreach_s_per_step": round(median["foreach"], 4),
                "fused_s_per_step": round(median["fused"], 4),
                "foreach_over_fused": round(median["foreach"] / median["fused"], 2),
                "step_s": {name: [round(x, 4) for x in s] for name, s in seconds.items()},
                "max_abs_weight_difference": gap,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
