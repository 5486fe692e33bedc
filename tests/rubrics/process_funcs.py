"""Module-level reward functions for tests/rubrics/test_process_pool.py (workers import them by name)."""

from __future__ import annotations

import os
import time

from rubrics import cpu_bound


def worker_pid(completion, answer) -> float:
    """The worker's process id (and proof that ``answer`` arrived)."""
    assert answer == "42"
    return float(os.getpid())


@cpu_bound(timeout_s=30)
def letters(completion, **kwargs) -> float:
    """Letters in the last message; ``kwargs`` stays empty in a worker."""
    assert kwargs == {}
    return float(sum(c.isalpha() for c in completion[-1]["content"]))


def group_lengths(completions) -> list[float]:
    return [float(len(c[-1]["content"])) for c in completions]


def fails(completion) -> float:
    raise ArithmeticError("cannot score this")


def sleeps(completion) -> float:
    time.sleep(5)
    return 1.0
