"""``Example``: what each kind of example starts a rollout from, and the one way a plain dict becomes one."""

from __future__ import annotations

import pytest

from envs.environment import SingleTurnEnv
from envs.examples import Example
from rubrics import Rubric
from rubrics.criteria.example import CriteriaExample

from .helpers import SCENARIO

BURN = CriteriaExample.model_validate(
    {
        "id": "burn-1",
        "prompt": [{"role": "user", "content": "I burned my hand on the stove."}],
        "criteria": [{"name": "cool", "requirement": "Says to cool the burn under water.", "weight": 5.0}],
    }
)


def test_a_scenario_example_starts_from_the_scenario() -> None:
    example = Example(scenario=SCENARIO)
    assert example.prompt == "A man collapsed in a park." and example.answer is SCENARIO.answers
    assert (example.task, example.name) == ("multistep", "park")
    assert example.info == {"scenario": "park", "revealed_info": dict(SCENARIO.revealed_info)}
    example.info["scenario"] = "changed"  # a fresh copy for every rollout: the example never changes
    assert example.name == "park"


def test_a_criteria_example_starts_from_its_conversation_and_is_named_by_its_id() -> None:
    example = Example(criteria=BURN)
    assert example.prompt == [{"role": "user", "content": "I burned my hand on the stove."}]
    assert (example.answer, example.task, example.info, example.name) == (
        "",
        "criteria",
        {"scenario": "burn-1"},
        "burn-1",
    )


def test_a_plain_dict_becomes_a_plain_prompt_in_one_place() -> None:
    example = Example.from_dict({"prompt": "2+2?", "answer": "4", "info": {"scenario": "sum"}})
    assert (example.prompt, example.answer, example.task, example.name) == ("2+2?", "4", "default", "sum")
    assert Example.from_dict({"prompt": "Hi"}).name == ""  # no scenario in its info: no name
    # the seed API: an environment takes hand-built dicts and holds Examples
    env = SingleTurnEnv([{"prompt": "2+2?", "answer": "4"}], Rubric(funcs=[]), tokenizer=None)
    assert env.dataset == [Example(text="2+2?", plain_answer="4")]


def test_an_example_holds_exactly_one_thing_and_a_prompt_is_text_or_messages() -> None:
    with pytest.raises(ValueError, match="exactly one of a scenario, a criteria example or a prompt, got 2"):
        Example(scenario=SCENARIO, text="Hi")
    with pytest.raises(ValueError, match="got 0"):
        Example()
    with pytest.raises(ValueError, match="prompt must be a string or a list of messages, got None"):
        Example.from_dict({"answer": "4"})
