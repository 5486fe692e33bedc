"""Memory that a CPU keeps for every new input shape of a matrix product: one ``nn.Linear(64, 128)`` called
on ``[1, n, 64]`` for n = 1 to ``--shapes``, in bf16 autocast or float32, with oneDNN's two shape-keyed
caches (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``, torch's ``LRU_CACHE_CAPACITY``) at ``--capacity`` entries or
left at their defaults (1024 each). Every ``--every`` shapes it prints the RSS over the start and glibc's
heap bytes in use and free (``mallinfo2``); at the end, the RSS after ``malloc_trim(0)``. One JSON object.
The measurements: docs/results.md, Host memory over a long run.

    .venv/bin/python benchmarks/shape_cache_memory.py                      # bf16, the default caches
    .venv/bin/python benchmarks/shape_cache_memory.py --capacity 64
    .venv/bin/python benchmarks/shape_cache_memory.py --dtype float32 --shapes 200
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MIB = 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--shapes", type=int, default=1600)
    parser.add_argument("--every", type=int, default=200)
    parser.add_argument("--capacity", type=int, default=None, help="both caches' entries (default: theirs)")
    parser.add_argument("--features", type=int, nargs=2, default=[64, 128], metavar=("IN", "OUT"))
    args = parser.parse_args()

    import contextlib

    import torch

    from train.distributed import cap_onednn_caches, mallinfo2, rss_gib, trim_host_memory

    if args.capacity is not None:  # after importing torch, before its first operation
        cap_onednn_caches(args.capacity)
    linear, x_1NH = torch.nn.Linear(*args.features), torch.randn(1, args.shapes, args.features[0])
    bf16 = args.dtype == "bfloat16"
    start = (rss_gib() or 0.0) * 1024
    rows = []
    with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
        for n in range(1, args.shapes + 1):
            linear(x_1NH[:, :n])
            if n % args.every == 0:
                info = mallinfo2()
                assert info is not None, "mallinfo2: glibc 2.33 or later"
                rss_mib = (rss_gib() or 0.0) * 1024 - start
                rows.append({"shapes": n, "rss_mib": round(rss_mib), "heap_in_use_mib": round(info.uordblks / MIB),
                             "heap_free_mib": round(info.fordblks / MIB)})  # fmt: skip
    trim_host_memory()
    caches = {
        k: os.environ.get(k, "default") for k in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
    }
    after_trim = round((rss_gib() or 0.0) * 1024 - start)
    out = {
        "dtype": args.dtype,
        "features": args.features,
        "caches": caches,
        "rows": rows,
        "rss_mib_after_malloc_trim": after_trim,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
