"""Seeded splits, scenario files and local Hugging Face datasets."""

from __future__ import annotations

from pathlib import Path

import pytest

from envs.datasets import load_hf_examples, load_scenario_split, split
from rubrics.multistep import load_rubric

ROOT = Path(__file__).resolve().parents[2]


def test_split_is_seeded_disjoint_and_complete() -> None:
    items = list(range(20))
    train, held = split(items, 0.25, seed=3)
    assert split(items, 0.25, seed=3) == (train, held)
    assert split(items, 0.25, seed=4) != (train, held)
    assert len(held) == 5 and sorted(train + held) == items
    assert split(items, 0.0, seed=3) == (items, [])
    with pytest.raises(ValueError, match="eval_fraction"):
        split(items, 1.0)
    with pytest.raises(ValueError, match="still train"):
        split([1], 0.5)


def test_scenario_split_from_the_shipped_files() -> None:
    rubric = load_rubric(ROOT / "configs/rubrics/first_responder.yaml")
    train, held = load_scenario_split(ROOT / "configs/scenarios/first_responder.yaml", rubric, 0.25, seed=0)
    assert len(train) + len(held) == 13 and len(held) == 3
    assert not {s.name for s in train} & {s.name for s in held}


def test_local_hugging_face_dataset(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    rows = {"question": ["What is 2+2?", "Name a colour."], "answer": ["4", "red"]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(str(tmp_path / "ds"))
    examples = load_hf_examples(tmp_path / "ds", prompt_key="question")
    assert [e["prompt"] for e in examples] == rows["question"]
    assert [e["answer"] for e in examples] == rows["answer"]
    with pytest.raises(ValueError, match="has no field 'prompt'"):
        load_hf_examples(tmp_path / "ds", prompt_key="prompt")
