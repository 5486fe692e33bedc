"""Fixtures of the environment and backend tests: the tiny model's local backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def local(tiny_model_dir: Path) -> Any:
    """The local backend on the tiny model, one per test module."""
    pytest.importorskip("transformers")
    from envs.backends import LocalBackend

    return LocalBackend.from_pretrained(str(tiny_model_dir))
