"""Shared by the environment and backend tests: a question, a reward, and the tiny model's local backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

QUESTION = [{"role": "user", "content": "What is 7 times 8?"}]
"""A one-message prompt."""


def length_reward(completion: Any, **kwargs: Any) -> float:
    """The reward of a reply: its length in characters."""
    return float(len(completion[-1]["content"]))


@pytest.fixture(scope="module")
def local(tiny_model_dir: Path) -> Any:
    """The local backend on the tiny model, one per test module."""
    pytest.importorskip("transformers")
    from envs.backends import LocalBackend

    return LocalBackend.from_pretrained(str(tiny_model_dir))
