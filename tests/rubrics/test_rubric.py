"""Rubric: the error policy, group-function results, async concurrency and timing."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from rubrics import Rubric, RubricGroup
from rubrics.types import Rollout

# -- error policy ------------------------------------------------------------------------------------


def flaky(completion, **kwargs):
    if completion == "boom":
        raise RuntimeError("judge exploded")
    return 1.0


def length(completion, **kwargs):
    return float(len(completion))


async def test_a_raising_function_marks_the_rollout_and_spares_the_batch() -> None:
    rubric = Rubric(funcs=[flaky, length], weights=[1.0, 0.1])
    states = [{"completion": "ok"}, {"completion": "boom"}, {"completion": "fine!"}]
    await rubric.score_group(states)
    ok, bad, fine = states
    assert "error" not in ok and "error" not in fine
    assert bad["error"] == "reward function flaky: RuntimeError: judge exploded"
    assert bad["metrics"]["errors/flaky"] == 1.0
    assert math.isnan(bad["metrics"]["flaky"]) and bad["metrics"]["length"] == 4.0
    assert math.isnan(bad["reward"])  # not scored, rather than scored as a bad answer
    assert bad["advantage"] == 0.0
    # the errored rollout is left out of the baseline: mean of 1.2 and 1.5 is 1.35
    assert ok["reward"] == pytest.approx(1.2) and fine["reward"] == pytest.approx(1.5)
    assert ok["advantage"] == pytest.approx(-0.15) and fine["advantage"] == pytest.approx(0.15)


async def test_non_numeric_result_is_an_error() -> None:
    rubric = Rubric(funcs=[lambda completion: "high"])
    state = {"completion": "x"}
    await rubric.score_rollout(state)
    assert "returned str 'high'" in state["error"]
    assert state["metrics"]["errors/<lambda>"] == 1.0


async def test_async_function_that_raises_is_marked_too() -> None:
    async def judge(completion, **kwargs):
        raise TimeoutError("judge timed out")

    rubric = Rubric(funcs=[judge])
    state = {"completion": "x"}
    await rubric.score_rollout(state)
    assert state["error"] == "reward function judge: TimeoutError: judge timed out"


async def test_generation_error_already_on_the_state_is_kept_and_excluded() -> None:
    rubric = Rubric(funcs=[length])
    states = [{"completion": "ab", "error": "generation: server gone"}, {"completion": "abcd"}]
    await rubric.score_group(states)
    assert states[0]["error"] == "generation: server gone"
    assert states[0]["advantage"] == 0.0 and states[1]["advantage"] == 0.0  # baseline is 4.0 alone


# -- group functions -----------------------------------------------------------------------------------


async def test_wrong_length_group_result_is_an_error_on_every_rollout() -> None:
    def short(completions):
        return [1.0] * (len(completions) - 1)

    rubric = Rubric(funcs=[short])
    states = [{"completion": "a"}, {"completion": "b"}, {"completion": "c"}]
    await rubric.score_group(states)
    for s in states:
        assert s["error"] == "reward function short: returned 2 values for a group of 3 rollouts"
        assert s["metrics"]["errors/short"] == 1.0


async def test_group_function_cannot_run_in_score_rollout() -> None:
    def ranks(completions):
        return [1.0] * len(completions)

    with pytest.raises(ValueError, match=r"ranks.*use score_group"):
        await Rubric(funcs=[ranks]).score_rollout({"completion": "a"})
    with pytest.raises(ValueError, match="score_group"):
        await RubricGroup([Rubric(funcs=[ranks])]).score_rollout({"completion": "a"})


async def test_singular_argument_in_group_function_must_be_shared() -> None:
    def vote(completions, answer):
        return [1.0 if c == answer else 0.0 for c in completions]

    rubric = Rubric(funcs=[vote])
    shared = [{"completion": "4", "answer": "4"}, {"completion": "5", "answer": "4"}]
    await rubric.score_group(shared)
    assert [s["reward"] for s in shared] == [1.0, 0.0]
    differing = [{"completion": "4", "answer": "4"}, {"completion": "5", "answer": "5"}]
    await rubric.score_group(differing)
    assert "differs across the group; ask for 'answers'" in differing[0]["error"]


async def test_group_function_receives_plural_lists_in_order() -> None:
    received = {}

    def spy(prompts, completions, answers, tasks, infos, states, **kwargs):
        received.update(prompts=prompts, completions=completions, answers=answers, tasks=tasks, infos=infos)
        assert states[1]["completion"] == "b"
        return [0.0, 1.0]

    rubric = Rubric(funcs=[spy])
    await rubric.score_group(
        [
            {"prompt": "p1", "completion": "a", "answer": 1, "task": "t", "info": {"k": 1}},
            {"prompt": "p2", "completion": "b", "answer": 2, "task": "t"},
        ]
    )
    assert received == {
        "prompts": ["p1", "p2"],
        "completions": ["a", "b"],
        "answers": [1, 2],
        "tasks": ["t", "t"],
        "infos": [{"k": 1}, {}],
    }


# -- concurrency and timing ------------------------------------------------------------------------


async def test_async_functions_run_concurrently() -> None:
    async def slow(completion, **kwargs):
        await asyncio.sleep(0.2)
        return 1.0

    rubric = Rubric(funcs=[slow])
    states = [{"completion": str(i)} for i in range(10)]
    start = time.perf_counter()
    await rubric.score_group(states)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0  # ten sequential calls would take 2.0 s
    assert all(s["reward"] == 1.0 for s in states)


async def test_rubric_group_timing_is_wall_time_and_advantages_are_recomputed() -> None:
    async def slow_a(completion, **kwargs):
        await asyncio.sleep(0.2)
        return float(len(completion))

    async def slow_b(completion, **kwargs):
        await asyncio.sleep(0.2)
        return 1.0

    group = RubricGroup([Rubric(funcs=[slow_a]), Rubric(funcs=[slow_b])])
    states = [{"completion": "a"}, {"completion": "abc"}]
    await group.score_group(states)
    for s in states:
        assert 150 <= s["timing"]["scoring_ms"] < 380  # concurrent children: ~200 ms, not ~400
    # aggregated rewards 2.0 and 4.0, mean 3.0
    assert [s["reward"] for s in states] == [2.0, 4.0]
    assert [s["advantage"] for s in states] == [-1.0, 1.0]


async def test_generation_time_is_added_to_total() -> None:
    state = {"completion": "a", "timing": {"generation_ms": 100.0, "total_ms": 100.0}}
    await Rubric(funcs=[length]).score_rollout(state)
    assert state["timing"]["total_ms"] == pytest.approx(100.0 + state["timing"]["scoring_ms"])


async def test_a_typed_rollout_is_given_as_the_seed_apis_dict_to_functions_that_ask_for_it() -> None:
    seen: list[object] = []

    def by_name(state: dict) -> float:
        seen.append(state)
        return 1.0

    def everything(**kwargs: object) -> float:
        seen.append(kwargs["state"])
        return 0.25

    def typed(rollout: Rollout) -> float:
        return 0.5 if rollout.completion == "c" else 0.0

    rollout = Rollout(prompt="p", completion="c")
    # asked for in a child of a group, and through **kwargs: the dict is made; 1.0 + 0.25 + 0.5
    await RubricGroup([Rubric(funcs=[typed]), Rubric(funcs=[by_name, everything])]).score_rollouts([rollout])
    assert rollout.reward == 1.75 and [s["completion"] for s in seen] == ["c", "c"]  # type: ignore[index]
    assert Rubric(funcs=[typed])._injectables(rollout, None)["state"] is None  # asked by none: not made
