"""``JudgeRubric``: a ``Rubric`` whose reward functions ask for ``judge`` and call it (verifiers style).

    async def correct(judge, prompt, completion, answer, state) -> float:
        verdict = await judge(prompt, completion, answer, state)
        return verdict.answer

A judge that fails (an LLM judge after its last retry) raises inside the reward function, so the rollout is
marked errored by the rubric's error policy, never scored 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rubrics.judges.base import Judge
from rubrics.judges.formats import JudgeResponse
from rubrics.parsers import Parser
from rubrics.rubric import Rubric
from rubrics.types import Messages, RewardFunc


class JudgeRubric(Rubric):
    """A rubric with a ``judge`` class object (and any number of named judges)."""

    def __init__(
        self,
        judge: Judge | None = None,
        funcs: Sequence[RewardFunc] | None = None,
        weights: Sequence[float] | None = None,
        parser: Parser | None = None,
        class_objects: dict[str, Any] | None = None,
        judges: dict[str, Judge] | None = None,
    ) -> None:
        objects: dict[str, Any] = dict(class_objects or {})
        if judge is not None:
            objects["judge"] = judge
        objects.update(judges or {})
        super().__init__(funcs=funcs, weights=weights, parser=parser, class_objects=objects)
        self.judge = judge
        """The default judge, injected as ``judge``."""

    def add_judge_reward(self, judge: Judge, weight: float = 1.0, name: str | None = None) -> None:
        """Register a reward function whose value is ``judge``'s scalar answer."""
        reward_name = name or judge.name

        async def judge_reward(
            prompt: Messages | str | None, completion: Messages | str | None, answer: Any, state: Any
        ) -> float:
            verdict: JudgeResponse = await judge(prompt, completion, answer, state)
            if isinstance(verdict.answer, list):
                raise TypeError(f"judge {judge.name!r} answered a vector; a reward needs a scalar judge")
            return float(verdict.answer)

        judge_reward.__name__ = reward_name
        self.add_reward_func(judge_reward, weight)
