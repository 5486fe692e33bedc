"""RubricGroup, as a property: a group's reward is the sum of its children's."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubrics import Rubric, RubricGroup

# -- property: a group's reward is the sum of its children's --------------------------------------------


def _const(name: str, value: float):
    def f(completion, **kwargs):
        return value

    f.__name__ = name
    return f


finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(
    children=st.lists(st.lists(st.tuples(finite, finite), min_size=0, max_size=4), min_size=1, max_size=4),
    n_states=st.integers(min_value=1, max_value=5),
)
def test_group_reward_is_the_sum_of_its_childrens(children, n_states) -> None:
    rubrics = []
    for c, funcs in enumerate(children):
        rubrics.append(
            Rubric(
                funcs=[_const(f"c{c}f{i}", value) for i, (value, _) in enumerate(funcs)],
                weights=[w for _, w in funcs],
            )
        )
    child_rewards = []
    for r in rubrics:
        states = [{"completion": str(i)} for i in range(n_states)]
        asyncio.run(r.score_group(states))
        child_rewards.append([s["reward"] for s in states])
    group_states = [{"completion": str(i)} for i in range(n_states)]
    asyncio.run(RubricGroup(rubrics).score_group(group_states))
    for i, s in enumerate(group_states):
        expected = sum(rewards[i] for rewards in child_rewards)
        assert s["reward"] == pytest.approx(expected, rel=1e-9, abs=1e-6)
        assert s["advantage"] == pytest.approx(0.0, abs=1e-6)  # every rollout scores the same
