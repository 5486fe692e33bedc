"""The trainer's threads: the event loop, the torch worker, the prefetch of steps ahead."""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

from train.threads import EventLoopThread, Prefetch, TorchWorker


class _Cursor:
    def __init__(self) -> None:
        self.taken = 0

    def state(self) -> dict[str, Any]:
        return {"taken": self.taken}


class _Orchestrator:
    """Stands in for ``train.orchestrator.Orchestrator``: ``produce`` takes one example from the cursor at
    call time (as the real one does) and its coroutine returns what it was asked for, in the thread it ran."""

    def __init__(self) -> None:
        self.cursor = _Cursor()
        self.requests: list[tuple[int, int]] = []

    def produce(self, step: int, policy_version: int) -> Any:
        self.requests.append((step, policy_version))
        self.cursor.taken += 1
        cursor, shares = (
            self.cursor.state(),
            {"share/a": self.cursor.taken / 10},
        )  # taken now, as the real one

        async def rollouts() -> tuple[int, int, str, dict[str, Any], dict[str, float]]:
            return step, policy_version, threading.current_thread().name, cursor, shares

        return rollouts()


def test_prefetch_requests_steps_ahead_with_the_cursor_of_their_request() -> None:
    orchestrator, loop = _Orchestrator(), EventLoopThread()
    try:
        prefetch = Prefetch(orchestrator, loop, ahead=1, max_steps=3)  # type: ignore[arg-type]
        # step 0 asks for steps 0 and 1, both with the weights of 0 optimiser steps; the cursor a checkpoint
        # of step 0 holds is the one right after step 0's examples were taken (1 taken), not after step 1's
        assert prefetch.take(0) == (0, 0, "rollouts", {"taken": 1}, {"share/a": 0.1})
        assert orchestrator.requests == [(0, 0), (1, 0)]
        # step 1 was already asked for (with version 0: one step off-policy); step 2 is asked for now
        assert prefetch.take(1) == (1, 0, "rollouts", {"taken": 2}, {"share/a": 0.2})
        assert orchestrator.requests == [(0, 0), (1, 0), (2, 1)]
        # nothing past max_steps is asked for
        assert prefetch.take(2) == (2, 1, "rollouts", {"taken": 3}, {"share/a": 0.3})
        assert orchestrator.requests == [(0, 0), (1, 0), (2, 1)]
    finally:
        loop.close()
    assert not loop.thread.is_alive()


def test_prefetch_on_policy_asks_for_one_step_at_a_time() -> None:
    orchestrator, loop = _Orchestrator(), EventLoopThread()
    try:
        prefetch = Prefetch(orchestrator, loop, ahead=0, max_steps=2)  # type: ignore[arg-type]
        prefetch.take(0)
        assert orchestrator.requests == [(0, 0)]
        prefetch.take(1)
        assert orchestrator.requests == [(0, 0), (1, 1)]
    finally:
        loop.close()


def test_torch_worker_runs_on_the_backends_thread_when_it_has_one() -> None:
    def where(x: int) -> tuple[int, str]:
        return x * 2, threading.current_thread().name

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="backend") as executor:
        assert TorchWorker(executor).run(where, 3) == (6, "backend_0")
    assert TorchWorker(None).run(where, 4) == (8, threading.current_thread().name)
