"""Two optimiser steps of the trainer's own step on one fixed global batch, each process on its share of the
rows (``rows[rank::world]``); writes, per step, this process's share of the loss and a hash of every
parameter, to ``OUT/rank<R>.json``, and the final weights to ``OUT/rank<R>.pt``. Run by ``tests/train/test_multi_node.py`` under two torchrun launches
(``--nnodes 2``, node ranks 0 and 1, over gloo), and alone as the one-process reference on the same batch.

    python tests/support/multi_node_driver.py MODEL_DIR OUT
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

ROWS = 4
"""Sequences in the global batch."""


def _global_batch() -> list[object]:
    import torch

    from rubrics.types import TokenSequence

    generator = torch.Generator().manual_seed(0)
    rows = []
    for i in range(ROWS):
        n = 12 + 3 * i  # rows of different lengths: padding and the global token count both matter
        ids = torch.randint(3, 200, (n,), generator=generator).tolist()
        rows.append(TokenSequence(ids, [0] * 4 + [1] * (n - 4), [-2.0] * 4 + [-1.5] * (n - 4)))
    return rows


def _parameter_hash(model: object) -> str:
    import torch

    digest = hashlib.sha256()
    for name, param in sorted(model.named_parameters()):  # type: ignore[attr-defined]
        digest.update(name.encode())
        digest.update(param.detach().to(torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()


def main(model_dir: str, out: str) -> None:
    from train.batching import collate
    from train.config_files import load_config
    from train.distributed import make_accelerator
    from train.policy import load_policy
    from train.step import train_step

    overrides = [f"model.name_or_path={model_dir}", "optim.micro_batch_size=2", "optim.learning_rate=0.01"]
    cfg = load_config(ROOT / "configs/train/tiny_test.yaml", overrides)
    accelerator = make_accelerator(cfg)
    policy = load_policy(cfg, accelerator)
    rank, world = accelerator.process_index, accelerator.num_processes
    rows = _global_batch()[rank::world]
    advantages = [1.0, -1.0, 0.5, -0.5][rank::world]
    batch = collate(rows, advantages, [False] * len(rows), pad_token_id=0)  # type: ignore[arg-type]
    steps = []
    for _ in range(2):
        stats = train_step(
            policy.model, policy.ref_model, batch, cfg, accelerator, policy.optimizer, policy.scheduler
        )
        unwrapped = accelerator.unwrap_model(policy.model)
        steps.append({"loss": stats["loss"], "parameters": _parameter_hash(unwrapped)})
    import torch

    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"rank{rank}.json").write_text(json.dumps({"world": world, "steps": steps}))
    torch.save(
        {k: v.detach().clone() for k, v in unwrapped.state_dict().items()}, Path(out) / f"rank{rank}.pt"
    )
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
