"""Datasets of examples: scenario files (YAML/JSONL) or a local Hugging Face dataset, with seeded splits."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.rubric_io import load_scenarios
from rubrics.multistep.scenario import Scenario

T = TypeVar("T")


def split(
    items: Sequence[T], eval_fraction: float = 0.25, seed: int = 0, min_eval: int = 1
) -> tuple[list[T], list[T]]:
    """A seeded shuffle into (train, eval); the same seed always gives the same split."""
    if not 0.0 <= eval_fraction < 1.0:
        raise ValueError(f"eval_fraction must lie in [0, 1), got {eval_fraction}")
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    n_eval = 0 if eval_fraction == 0 else max(min_eval, round(len(items) * eval_fraction))
    if n_eval >= len(items):
        raise ValueError(f"cannot hold out {n_eval} of {len(items)} examples and still train on some")
    held = sorted(order[:n_eval])
    kept = sorted(order[n_eval:])
    return [items[i] for i in kept], [items[i] for i in held]


def load_scenario_split(
    path: str | Path, rubric: MultiStepRubric, eval_fraction: float = 0.25, seed: int = 0
) -> tuple[list[Scenario], list[Scenario]]:
    """Scenarios from a YAML/JSONL file, validated against ``rubric`` and split (train, eval)."""
    return split(load_scenarios(path, rubric), eval_fraction, seed)


def load_hf_examples(
    path: str | Path, split_name: str | None = None, prompt_key: str = "prompt"
) -> list[dict[str, Any]]:
    """Examples from a dataset saved with ``datasets.save_to_disk`` (never from a hub)."""
    from datasets import DatasetDict, load_from_disk

    data = load_from_disk(str(path))
    if isinstance(data, DatasetDict):
        if split_name is None:
            if len(data) != 1:
                raise ValueError(f"{path}: choose a split among {sorted(data)}")
            split_name = next(iter(data))
        data = data[split_name]
    rows = [dict(row) for row in data]
    for i, row in enumerate(rows):
        if prompt_key not in row:
            raise ValueError(f"{path}: row {i} has no field {prompt_key!r} (fields: {sorted(row)})")
        row.setdefault("prompt", row[prompt_key])
    return rows
