"""Compare two run folders key by key, timings aside: did a change move any number?

    .venv/bin/python scripts/compare_runs.py BEFORE_DIR AFTER_DIR

Reads every ``.json`` and ``.jsonl`` file of ``BEFORE_DIR`` (``metrics.jsonl``, ``samples.jsonl``, each
evaluation's ``rollouts.jsonl`` and ``summary.json``, the probe files, checkpoints' ``trainer_state.json``;
wandb's own files left out) and the file of the same name in ``AFTER_DIR``; compares them line by line and
key by key, nested values as their JSON. Keys that measure time or memory (``time/...``, ``..._s``,
``..._ms``, ``timing``, ``wall_time``, ``saved_at``, ``memory/...``, RSS) and the wandb run id differ from
run to run and are left out. Prints each difference and a last line with the count of keys compared and of
differences; exits 1 when there is a difference or a file is missing, 0 otherwise. The runs are
deterministic (``docs/results.md``): the same config on the same code gives the same metrics key by key.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

VOLATILE_KEYS = frozenset({"timing", "wall_time", "saved_at", "seconds", "wandb_run_id"})
"""Keys whose values differ between two runs of the same code: times, and the wandb run's id."""


def volatile(key: str) -> bool:
    """Whether ``key`` measures time or memory, or names the wandb run (left out of the comparison)."""
    return (
        key in VOLATILE_KEYS
        or key.startswith(("time/", "tokens_per_s", "memory/"))
        or key.endswith(("_s", "_ms", "_gib"))
        or "rss" in key
        or "per_s" in key
    )


def stable(value: Any) -> Any:
    """``value`` without its volatile keys, at every depth."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if not volatile(k)}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


def records(path: Path) -> list[Any]:
    """The JSON values of a ``.jsonl`` file (one per line), or the one value of a ``.json`` file."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return [json.loads(text)]


def compare(before: Path, after: Path) -> tuple[int, list[str]]:
    """The number of keys compared and one line per difference between the two run folders."""
    keys, differences = 0, []
    for old in sorted(before.rglob("*")):
        if old.suffix not in (".json", ".jsonl") or "wandb" in old.parts:
            continue
        name = old.relative_to(before)
        new = after / name
        if not new.is_file():
            differences.append(f"{name}: missing in {after}")
            continue
        a, b = [stable(r) for r in records(old)], [stable(r) for r in records(new)]
        if len(a) != len(b):
            differences.append(f"{name}: {len(a)} records, then {len(b)}")
            continue
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if not (isinstance(x, dict) and isinstance(y, dict)):
                keys += 1
                if x != y:
                    differences.append(f"{name} record {i}: differs")
                continue
            keys += len(x)
            if list(x) != list(y):
                differences.append(f"{name} record {i}: keys {list(x)} then {list(y)}")
            for key in x.keys() & y.keys():
                if json.dumps(x[key]) != json.dumps(y[key]):
                    differences.append(f"{name} record {i} {key}: {x[key]!r:.80} then {y[key]!r:.80}")
    return keys, differences


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    before, after = Path(argv[0]), Path(argv[1])
    keys, differences = compare(before, after)
    for line in differences:
        print(line)
    print(f"{before} against {after}: {keys} keys compared, {len(differences)} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
