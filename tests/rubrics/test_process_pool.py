"""cpu_bound: synchronous reward functions in worker processes, injected and scored like any other."""

from __future__ import annotations

import os

import pytest

from rubrics import Rubric, cpu_bound
from rubrics.process_pool import ProcessRewardFunc
from tests.rubrics import process_funcs


def states(texts: list[str]) -> list[dict]:
    return [
        {"prompt": "q", "completion": [{"role": "assistant", "content": t}], "answer": "42"} for t in texts
    ]


async def test_functions_run_in_workers_with_injected_arguments() -> None:
    rubric = Rubric(
        funcs=[
            cpu_bound(process_funcs.worker_pid),
            process_funcs.letters,
            cpu_bound(process_funcs.group_lengths),
        ],
        weights=[0.0, 1.0, 0.5],
    )
    group = states(["ab c", "xyz!!"])
    await rubric.score_group(group)
    for state, n_letters, length in zip(group, [3, 3], [4, 5], strict=True):
        assert "error" not in state, state.get("error")
        assert state["metrics"]["worker_pid"] != os.getpid()  # ran in another process
        assert state["metrics"]["letters"] == n_letters and state["metrics"]["group_lengths"] == length
        assert state["reward"] == pytest.approx(n_letters + 0.5 * length)
    assert rubric._get_reward_func_names() == ["worker_pid", "letters", "group_lengths"]


async def test_errors_and_timeouts_mark_the_rollout() -> None:
    rubric = Rubric(funcs=[cpu_bound(process_funcs.fails), cpu_bound(process_funcs.sleeps, timeout_s=0.5)])
    (state,) = states(["anything"])
    await rubric.score_rollout(state)
    assert "ArithmeticError: cannot score this" in state["error"]
    assert "sleeps took longer than 0.5s in its worker" in state["error"]
    assert state["metrics"]["errors/fails"] == 1.0 and state["metrics"]["errors/sleeps"] == 1.0


def test_functions_a_worker_cannot_import_are_refused() -> None:
    def nested(completion) -> float:
        return 0.0

    with pytest.raises(ValueError, match="must be a function defined at module level"):
        cpu_bound(nested)
    with pytest.raises(ValueError, match="must be a function defined at module level"):
        cpu_bound(lambda completion: 0.0)

    async def coroutine(completion) -> float:
        return 0.0

    coroutine.__qualname__ = "coroutine"
    with pytest.raises(ValueError, match="is async"):
        ProcessRewardFunc(coroutine)
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        cpu_bound(process_funcs.fails, timeout_s=0)
