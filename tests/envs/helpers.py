"""Shared by the environment, backend and evaluation tests: a question, a reward, and a five-requirement
progressive-reveal rubric with one scenario that answers yes everywhere."""

from __future__ import annotations

from typing import Any

from rubrics.multistep import BinaryRequirement, MultiStepRubric, RuleRequirementJudge, Scenario

QUESTION = [{"role": "user", "content": "What is 7 times 8?"}]
"""A one-message prompt."""


def length_reward(completion: Any, **kwargs: Any) -> float:
    """The reward of a reply: its length in characters."""
    return float(len(completion[-1]["content"]))


def reveal_rubric() -> MultiStepRubric:
    """safety -> vitals -> (oxygen -> transport, position), judged by rules, scored by completion ratio."""
    reqs = [
        BinaryRequirement(
            name="safety",
            question="Safe?",
            dependencies={1.0: ["vitals"]},
            rules={1.0: {"any": ["scene is safe"]}, 0.0: {"any": ["not safe"]}},
        ),
        BinaryRequirement(
            name="vitals",
            question="Vitals?",
            dependencies={1.0: ["oxygen", "position"]},
            rules={1.0: {"any": ["check vitals"]}},
        ),
        BinaryRequirement(
            name="oxygen",
            question="Oxygen?",
            dependencies={1.0: ["transport"]},
            rules={1.0: {"any": ["give oxygen"]}},
        ),
        BinaryRequirement(name="position", question="Position?", rules={1.0: {"any": ["recovery position"]}}),
        BinaryRequirement(name="transport", question="Transport?", rules={1.0: {"any": ["transport"]}}),
    ]
    return MultiStepRubric(reqs, [RuleRequirementJudge()], reward_strategy={"type": "completion_ratio"})


SCENARIO = Scenario(
    prompt="A man collapsed in a park.",
    answers={n: {"answer": 1.0} for n in ("safety", "vitals", "oxygen", "position", "transport")},
    name="park",
    revealed_info={"safety": "You reach him. He is breathing.", "vitals": "Pulse 120, SpO2 88%."},
)
