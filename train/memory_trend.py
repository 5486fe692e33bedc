"""The trend of a run's memory over its steps: the least-squares slope, in GiB per step, of each memory metric
that is held now rather than a running peak (``memory/rss_gib``; glibc's ``memory/heap_in_use_gib`` and
``memory/heap_free_gib``; on CUDA ``memory/gpu_allocated_gib`` and ``memory/gpu_reserved_gib``;
``train.distributed.memory_gib``), over the last steps of a run's ``metrics.jsonl``. A flat run's slope is
about 0 however high its peak; a leak's is what each step adds. Where the RSS climbs, the heap's two say
whom to blame: live blocks (a cache, a leak) or free space the allocator keeps.

The one place the slope is computed: the flat-memory tests (``tests/train/test_host_memory.py``), the GPU
check (``benchmarks/rollout_step.py``, ``scripts/gpu_check.sh``) and docs/results.md's numbers use it.

    python -m train.memory_trend runs/first_responder_cpu_long --last 15   # prints one JSON object
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

HELD_NOW = (
    "memory/rss_gib",
    "memory/heap_in_use_gib",
    "memory/heap_free_gib",
    "memory/gpu_allocated_gib",
    "memory/gpu_reserved_gib",
)
"""The memory metrics whose slope tells memory held from a peak (the ``memory/peak_...`` ones only rise)."""


def slope(points: Sequence[tuple[float, float]]) -> float:
    """The least-squares slope of ``y`` over ``x`` through ``points`` (``(x, y)`` pairs).

    Raises:
        ValueError: fewer than two distinct ``x``."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / max(n, 1)
    mean_y = sum(y for _, y in points) / max(n, 1)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if n < 2 or spread == 0:
        raise ValueError(f"a slope needs two distinct steps, got {[x for x, _ in points]}")
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def per_step(rows: Iterable[Mapping[str, Any]], key: str) -> dict[int, float]:
    """``key``'s value at each training step (``step`` >= 1) that logged it; the last row of a step wins (a
    resumed run logs a step again)."""
    return {int(r["step"]): float(r[key]) for r in rows if key in r and int(r.get("step", 0)) >= 1}


def memory_slopes(
    rows: Iterable[Mapping[str, Any]], last: int | None = None, keys: Sequence[str] = HELD_NOW
) -> dict[str, Any]:
    """Each of ``keys`` the rows log: its slope in GiB per step over the last ``last`` steps that logged it
    (all of them when None), with the steps it spans and its first and last value there. A key logged at
    fewer than two steps is left out."""
    rows = list(rows)
    out: dict[str, Any] = {}
    for key in keys:
        series = sorted(per_step(rows, key).items())[-last if last else None :]
        if len(series) < 2:
            continue
        out[key] = {
            "gib_per_step": slope(series),
            "steps": [series[0][0], series[-1][0]],
            "first_gib": series[0][1],
            "last_gib": series[-1][1],
        }
    return out


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl``, or of the one in the run folder ``path``."""
    file = path / "metrics.jsonl" if path.is_dir() else path
    return [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]


def main(argv: Sequence[str] | None = None) -> None:
    """Print the memory slopes of a run as one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run folder or its metrics.jsonl")
    parser.add_argument("--last", type=int, default=None, help="the last N steps only (default: all)")
    args = parser.parse_args(argv)
    print(json.dumps(memory_slopes(read_metrics(args.run), args.last), indent=2))


if __name__ == "__main__":
    main()
