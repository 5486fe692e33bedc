"""Writing the outputs atomically: every file goes to a temporary name in its folder, then ``os.replace``.

A run killed at any moment leaves each output either absent, whole and old, or whole and new, never cut;
what it may leave besides is a temporary file or folder (``is_temporary``: a dot name with ``.tmp``), which
no reader takes for an output and the next run removes. Files and folders are made with the user's umask
(``0o666`` and ``0o777`` less the umask: 644 and 755 under umask 022), as ``open`` and ``mkdir`` would, so
a dataset meant to be shared gets the user's usual modes.

Files in the output folder: ``hidden_descriptions.jsonl``, ``scenarios.yaml`` and ``scenarios.jsonl`` (the
scenario file format; ``rubric-grpo rubric validate --scenarios`` and training load them), ``dataset/`` (a
``datasets.DatasetDict`` with the splits ``hidden`` and ``scenarios``, from ``save_to_disk``) and
``report.json``. Work files (the plan and one record per finished item) live in ``work/``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rubrics.multistep.rubric_io import save_scenarios, scenario_from_dict

TEMP_MARK = ".tmp"
"""What every temporary name holds: ``.<name>.<random>.tmp<suffix>``."""


def temporary_path(path: Path) -> Path:
    """A fresh temporary name beside ``path``: hidden, marked ``.tmp``, with ``path``'s suffix (writers
    such as ``save_scenarios`` choose the format by the suffix)."""
    return path.parent / f".{path.name}.{secrets.token_hex(6)}{TEMP_MARK}{path.suffix}"


def is_temporary(path: Path) -> bool:
    """Whether ``path`` is a temporary file or folder of ``atomic_write`` or ``_save_dataset``."""
    return path.name.startswith(".") and TEMP_MARK in path.name


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` on a temporary path beside ``path``, then move it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask applies, as in open()
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    """``text`` to ``path``, atomically."""

    def write(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")

    atomic_write(path, write)


def write_json(path: Path, data: Any) -> None:
    """``data`` as indented JSON, atomically."""
    write_text(path, json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def hidden_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``hidden`` split: one row per kept scenario."""
    return [
        {
            "id": r["id"],
            "name": r["scenario"]["name"],
            "description": r.get("description", ""),
            "hidden_description": r["hidden_description"],
            "path": json.dumps(r["planned"]),
        }
        for r in records
    ]


def scenario_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``scenarios`` split: the scenario fields, nested ones as JSON text (one Arrow schema for any
    rubric), plus the item id."""
    rows = []
    for r in records:
        s = r["scenario"]
        rows.append(
            {
                "id": r["id"],
                "name": s["name"],
                "description": s.get("description", ""),
                "hidden_description": s.get("hidden_description", ""),
                "prompt": s["prompt"] if isinstance(s["prompt"], str) else json.dumps(s["prompt"]),
                "answers": json.dumps(s["answers"], ensure_ascii=False),
                "revealed_info": json.dumps(s.get("revealed_info", {}), ensure_ascii=False),
            }
        )
    return rows


def dataset_dict(records: Sequence[dict[str, Any]]) -> Any:
    """``DatasetDict({"hidden": ..., "scenarios": ...})`` of the kept records."""
    from datasets import Dataset, DatasetDict

    hidden, scenarios = hidden_rows(records), scenario_rows(records)
    hidden_cols = ["id", "name", "description", "hidden_description", "path"]
    scenario_cols = ["id", "name", "description", "hidden_description", "prompt", "answers", "revealed_info"]
    return DatasetDict(
        {
            "hidden": Dataset.from_dict({c: [row[c] for row in hidden] for c in hidden_cols}),
            "scenarios": Dataset.from_dict({c: [row[c] for row in scenarios] for c in scenario_cols}),
        }
    )


def write_outputs(
    out: Path, rubric_name: str, kept: Sequence[dict[str, Any]], report: dict[str, Any]
) -> None:
    """Every output file of the kept records, then ``report.json`` last."""
    scenarios = [scenario_from_dict(r["scenario"], f"item {r['id']}") for r in kept]
    write_text(
        out / "hidden_descriptions.jsonl",
        "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in hidden_rows(kept)),
    )
    if scenarios:
        atomic_write(out / "scenarios.yaml", lambda tmp: save_scenarios(scenarios, tmp, rubric_name))
        atomic_write(out / "scenarios.jsonl", lambda tmp: save_scenarios(scenarios, tmp))
    else:  # a scenario file needs at least one scenario: leave none rather than an unloadable one
        for name in ("scenarios.yaml", "scenarios.jsonl"):
            (out / name).unlink(missing_ok=True)
    _save_dataset(out / "dataset", dataset_dict(kept))
    write_json(out / "report.json", report)


def _save_dataset(target: Path, data: Any) -> None:
    """``save_to_disk`` into a temporary folder, then swap it in (the old one is removed after)."""
    from datasets import disable_progress_bars

    disable_progress_bars()  # the pipeline prints its own summary
    tmp = temporary_path(target)
    tmp.mkdir(mode=0o777)  # the umask applies (mkdtemp would make it 700)
    old = target.parent / f".{target.name}.old{TEMP_MARK}"
    try:
        data.save_to_disk(str(tmp))
        shutil.rmtree(old, ignore_errors=True)
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def push_to_hub(out: Path, repo: str) -> None:
    """Push both splits of ``out/dataset`` to the Hub; ``RuntimeError`` when no token is configured."""
    from datasets import load_from_disk
    from huggingface_hub import get_token

    if not get_token():
        raise RuntimeError("no Hugging Face token configured (set HF_TOKEN or run `hf auth login`)")
    load_from_disk(str(out / "dataset")).push_to_hub(repo)
