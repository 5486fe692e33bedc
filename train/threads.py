"""The threads the GRPO loop runs on, so that ``train.trainer`` reads as the algorithm alone.

- ``EventLoopThread``: one asyncio loop in a background thread; generation, judging, the weight sync and
  held-out evaluation run there.
- ``TorchWorker``: the run's one torch thread (loading, the update, the warm start, checkpoints; the local
  backend is handed it and samples there too).
- ``Prefetch``: each step's rollouts, requested on the event loop up to ``rollout.max_off_policy_steps``
  steps ahead of the update, with the data cursor and stratum shares taken when its examples were.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from train.orchestrator import Orchestrator, StepRollouts

T = TypeVar("T")
P = ParamSpec("P")


class EventLoopThread:
    """An event loop in a background thread: generation, judging, weight sync and evaluation run there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rollouts", daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coro`` on the loop."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result."""
        return self.submit(coro).result()

    def close(self) -> None:
        """Stop the loop and wait (up to 30 s) for its thread to end."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)


class TorchWorker:
    """Runs torch work on one thread. Each thread that runs torch's parallel regions gets an OpenMP team of
    its own, and two live teams on a CPU's cores slow every kernel of both down
    (``benchmarks/decode_profile.py --second-thread``: a decode took twice as long). So the trainer loads,
    trains, checkpoints and (through the local backend, which is given this thread) generates here;
    ``executor`` None runs in the caller."""

    def __init__(self, executor: concurrent.futures.Executor | None) -> None:
        self.executor = executor

    def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` on the torch thread (or here), waiting for its result."""
        if self.executor is None:
            return fn(*args, **kwargs)
        return self.executor.submit(fn, *args, **kwargs).result()

    def close(self) -> None:
        """Stop the thread once its work is done."""
        if self.executor is not None:
            self.executor.shutdown(wait=True)


class Prefetch:
    """Steps' rollouts requested up to ``ahead`` steps ahead of the trainer, each with the data cursor a
    checkpoint of that step must hold and its examples per stratum (``StepRollouts.cursor``, ``shares``)."""

    def __init__(self, orchestrator: Orchestrator, loop: EventLoopThread, ahead: int, max_steps: int) -> None:
        self.orchestrator, self.loop = orchestrator, loop
        self.ahead, self.max_steps = ahead, max_steps
        self.pending: dict[int, concurrent.futures.Future[StepRollouts]] = {}

    def take(self, step: int) -> StepRollouts:
        """``step``'s rollouts (waiting for them); first requests the steps ahead with the weights of ``step``
        optimiser steps."""
        for ahead in range(self.ahead + 1):
            k = step + ahead
            if k < self.max_steps and k not in self.pending:
                self.pending[k] = self.loop.submit(self.orchestrator.produce(k, policy_version=step))
        return self.pending.pop(step).result()


def timed(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> tuple[T, float]:
    """``fn(*args)`` and its wall time in seconds."""
    start = time.perf_counter()
    return fn(*args, **kwargs), time.perf_counter() - start
