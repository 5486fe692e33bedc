"""Binding reward functions' arguments: a misspelled one stops scoring before anything runs, class objects,
defaults, plural names, weights, positional-only parameters, duplicate names."""

from __future__ import annotations

import asyncio
import math

import pytest

from rubrics import Rubric, RubricGroup
from rubrics.binding import RewardFuncBindingError

# -- binding ---------------------------------------------------------------------------------------


async def test_misspelled_argument_stops_scoring_before_anything_runs() -> None:
    calls = []

    async def judged(completion, **kwargs) -> float:  # would run first if scoring started
        calls.append("judged")
        return 1.0

    def reward(compltion, answer):
        return 1.0

    rubric = Rubric(funcs=[judged, reward])  # registration records the unresolved argument
    with pytest.raises(RewardFuncBindingError) as err:
        await rubric.score_rollout({"completion": "x", "answer": "y"})
    message = str(err.value)
    assert "reward function 'reward' asks for argument 'compltion'" in message
    for name in ("answer", "completion", "info", "parser", "prompt", "state", "task"):
        assert name in message
    assert "Did you mean 'completion'?" in message
    assert calls == []  # refused before any reward function (or judge) ran


async def test_a_class_object_registered_after_its_function_resolves_it() -> None:
    def use_scorer(completion, scorer, **kwargs):
        return scorer(completion)

    rubric = Rubric(funcs=[use_scorer])
    with pytest.raises(RewardFuncBindingError, match=r"add_class_object\('scorer', obj\)"):
        rubric.check_bindings()
    rubric.add_class_object("scorer", lambda completion: 0.5)
    state = {"completion": "x"}
    await rubric.score_rollout(state)
    assert state["reward"] == 0.5
    # in a group, a child that cannot score stops the whole group before anything runs
    group = RubricGroup([Rubric(funcs=[lambda completion: 1.0]), Rubric(funcs=[use_scorer])])
    with pytest.raises(RewardFuncBindingError, match="'scorer'"):
        await group.score_group([{"completion": "x"}])


def test_defaulted_unknown_argument_keeps_its_default() -> None:
    seen = []

    def reward(completion, scale=3.0):
        seen.append(scale)
        return scale

    rubric = Rubric(funcs=[reward])
    state = {"completion": "x"}
    asyncio.run(rubric.score_rollout(state))
    assert seen == [3.0] and state["reward"] == 3.0


def test_plural_names_only_bind_in_group_functions_and_singular_plural_mixing() -> None:
    def needs_answers(completion, answers):
        return [1.0]

    # `completion` singular + `answers` plural: a group function; binding succeeds
    rubric = Rubric(funcs=[needs_answers])
    assert rubric._has_group_funcs() == ["needs_answers"]


def test_weights_must_be_finite_numbers() -> None:
    with pytest.raises(ValueError, match="finite"):
        Rubric(funcs=[lambda completion: 1.0], weights=[math.nan])


def test_positional_only_parameters_are_rejected() -> None:
    def reward(completion, /):
        return 1.0

    with pytest.raises(RewardFuncBindingError, match="positional-only"):
        Rubric(funcs=[reward])


def test_duplicate_names_get_suffixes() -> None:
    rubric = Rubric(funcs=[lambda completion: 1.0, lambda completion: 2.0])
    assert rubric._get_reward_func_names() == ["<lambda>", "<lambda>_2"]
