"""Each trainer test starts as a fresh process would: accelerate keeps its state in a process-wide singleton."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def fresh_accelerate_state() -> Iterator[None]:
    yield
    try:
        from accelerate.state import AcceleratorState, GradientState
    except ImportError:
        return
    AcceleratorState._reset_state()
    GradientState._reset_state()
