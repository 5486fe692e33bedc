"""CPU-bound reward functions in worker processes, so that scoring never holds up the event loop.

A synchronous reward function runs in the scoring loop's thread and blocks it: judges waiting on HTTP,
generation and the other functions all wait. ``cpu_bound`` turns it into an awaitable that runs in a shared
pool of worker processes (``spawn``: never a fork of a process that runs an event loop)::

    from rubrics import Rubric, cpu_bound

    def proof_checks(completion, answer) -> float:  # module level: workers import it by name
        ...

    rubric = Rubric(funcs=[cpu_bound(proof_checks, timeout_s=30)])

It also works as a decorator (``@cpu_bound`` or ``@cpu_bound(timeout_s=30)``). The function keeps its name
(the metric key) and its parameters, so arguments are still injected by name and a plural name still makes
it a group function. Rules that come with the process boundary:

- the function must be importable by name: defined at module level, not a lambda or a nested function
  (refused when it is wrapped);
- it receives only the arguments it names: a ``**kwargs`` stays empty, since every value is pickled to the
  worker (a whole ``state`` is rarely wanted there);
- its arguments and result must pickle;
- a call that takes longer than ``timeout_s`` raises ``TimeoutError`` (the rollout is marked errored, as for
  any failing function); the worker finishes the call in the background.

The pool has ``max_workers`` processes (default: the CPU count) and starts on first use; ``shutdown()``
stops it (it is also stopped at interpreter exit).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import importlib
import inspect
import multiprocessing
import os
import threading
from collections.abc import Callable
from typing import Any, overload

_lock = threading.Lock()
_pool: concurrent.futures.ProcessPoolExecutor | None = None
_max_workers: int | None = None


def configure(max_workers: int) -> None:
    """Set the pool's size (takes effect when the pool next starts: call before first use or after
    ``shutdown``)."""
    global _max_workers
    if max_workers < 1:
        raise ValueError(f"max_workers must be at least 1, got {max_workers}")
    _max_workers = max_workers


def shutdown() -> None:
    """Stop the worker processes (calls in flight are cancelled)."""
    global _pool
    with _lock:
        if _pool is not None:
            _pool.shutdown(wait=False, cancel_futures=True)
            _pool = None


def _executor() -> concurrent.futures.ProcessPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            workers = _max_workers or os.cpu_count() or 1
            _pool = concurrent.futures.ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("spawn")
            )
        return _pool


atexit.register(shutdown)


def _call_by_name(module: str, qualname: str, kwargs: dict[str, Any]) -> Any:
    """In a worker: import the function by name and call it (a ``cpu_bound`` wrapper is unwrapped)."""
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    if isinstance(target, ProcessRewardFunc):
        target = target.func
    return target(**kwargs)


class ProcessRewardFunc:
    """A synchronous reward function run in the shared worker pool (see the module docstring)."""

    def __init__(self, func: Callable[..., Any], timeout_s: float = 60.0) -> None:
        name = getattr(func, "__qualname__", None) or repr(func)
        if not inspect.isfunction(func) or "<" in name:  # lambdas, nested functions, bound methods
            raise ValueError(
                f"cpu_bound: {name!r} must be a function defined at module level (workers import it by name)"
            )
        if inspect.iscoroutinefunction(func):
            raise ValueError(f"cpu_bound: {name!r} is async; only synchronous functions need a process")
        if timeout_s <= 0:
            raise ValueError(f"cpu_bound: timeout_s must be positive, got {timeout_s}")
        self.func = func
        """The wrapped function."""
        self.timeout_s = timeout_s
        """Longest time one call may take."""
        self.__name__ = func.__name__
        self.__qualname__ = func.__qualname__
        self.__module__ = func.__module__
        self.__doc__ = func.__doc__
        signature = inspect.signature(func)
        self.__signature__ = signature.replace(
            parameters=[p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
        )

    async def __call__(self, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(
            _executor(), _call_by_name, self.func.__module__, self.func.__qualname__, kwargs
        )
        try:
            return await asyncio.wait_for(future, timeout=self.timeout_s)
        except TimeoutError as exc:
            raise TimeoutError(f"{self.__name__} took longer than {self.timeout_s:g}s in its worker") from exc

    def __repr__(self) -> str:
        return f"cpu_bound({self.__module__}.{self.__qualname__}, timeout_s={self.timeout_s:g})"


@overload
def cpu_bound(func: Callable[..., Any], *, timeout_s: float = 60.0) -> ProcessRewardFunc: ...
@overload
def cpu_bound(
    func: None = None, *, timeout_s: float = 60.0
) -> Callable[[Callable[..., Any]], ProcessRewardFunc]: ...
def cpu_bound(
    func: Callable[..., Any] | None = None, *, timeout_s: float = 60.0
) -> ProcessRewardFunc | Callable[[Callable[..., Any]], ProcessRewardFunc]:
    """Run a synchronous, module-level reward function in the worker pool (see the module docstring)."""
    if func is None:
        return lambda f: ProcessRewardFunc(f, timeout_s)
    return ProcessRewardFunc(func, timeout_s)
