"""``train.distributed.reuse_freed_memory``: freed blocks are reused rather than faulted in afresh."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

# Allocates, touches and frees a 64 MiB tensor (a micro-batch's logits are larger) 20 times and prints the
# minor page faults that took, before and after the allocator setting (in a fresh process, so the test
# session's allocator is left alone). glibc maps a block over 32 MiB afresh every time by default.
PROBE = """
import json, resource, torch
from train.distributed import reuse_freed_memory

def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        torch.empty(16 << 20).fill_(1.0)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

faults()
default = faults()
applied = reuse_freed_memory()
faults()
print(json.dumps({"default": default, "applied": applied, "reused": faults()}))
"""


@pytest.mark.skipif(platform.system() != "Linux", reason="glibc's mallopt")
def test_freed_blocks_are_reused_instead_of_faulted_in_again() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["applied"] is True
    # by default each 64 MiB block is mapped afresh: about 16,384 faults (4 KiB pages) per round
    assert result["default"] > 20 * 8_000
    assert result["reused"] < result["default"] / 20
