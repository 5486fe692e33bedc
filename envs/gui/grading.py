"""Grade one typed reply against a rubric and a scenario's ground truth, and price it under every strategy.

The walk is the library's (``MultiStepRubric.evaluate``): the rubric's own judges, rule judges offline, an
LLM judge when its endpoint answers. The reward is computed by every reward strategy, normalised and raw,
side by side, next to the ideal walk (``ground_truth_walk``) it is normalised by.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.rubric_io import rubric_from_dict
from rubrics.multistep.strategies import PARAMS, STRATEGIES, RewardStrategy
from rubrics.multistep.walk import EvaluationResult, ground_truth_walk


@dataclass(frozen=True)
class StrategyReward:
    """One strategy's reward for the graded reply."""

    strategy: str
    """The strategy's ``type``."""
    normalized: float
    """Divided by the ideal walk's score (in [0, 1])."""
    raw: float
    """Before normalisation."""
    ideal_raw: float
    """The ideal walk's raw score (the divisor)."""
    current: bool
    """Whether this is the rubric's configured strategy."""


@dataclass(frozen=True)
class GradeReport:
    """What grading one reply found."""

    result: EvaluationResult
    """The walk over the reply: verdicts, path, stop reason."""
    ideal_path: list[str]
    """The ground-truth path a perfect reply would satisfy."""
    rewards: list[StrategyReward]
    """The reward under every strategy."""
    reward: float
    """The rubric's own reward (its configured strategy)."""
    reveals: list[tuple[str, str]]
    """(requirement, text) revealed because the reply satisfied that requirement, in judging order."""


def parse_answer(text: str) -> Any:
    """A ground-truth answer typed in the app: a number, or numbers separated by commas (a unit vector);
    blank is None (no ground truth)."""
    parts = [p for p in text.replace(",", " ").split() if p]
    if not parts:
        return None
    numbers = [float(p) for p in parts]
    return numbers[0] if len(numbers) == 1 else numbers


def with_default_judge(doc: Mapping[str, Any], judge: str | None) -> MultiStepRubric:
    """The rubric of ``doc``, every requirement answered by ``judge`` when one is given (to grade a rubric
    written for an LLM judge with its rule judge, or the other way round)."""
    data = copy.deepcopy(dict(doc))
    if judge:
        data["default_judge"] = judge
        for req in data.get("requirements") or []:
            req.pop("judge", None)
    return rubric_from_dict(data, "rubric")


def grade(
    rubric: MultiStepRubric,
    answers: Mapping[str, Any],
    reply: str,
    prompt: Any = None,
    revealed_info: Mapping[str, str] | None = None,
) -> GradeReport:
    """Walk ``rubric`` over ``reply`` against ``answers`` and price it under every strategy (judge errors
    propagate: the app shows them)."""
    result = asyncio.run(rubric.evaluate(answers, reply, prompt))
    ideal = ground_truth_walk(rubric.graph, answers).results
    current = rubric.reward_strategy
    rewards = []
    for kind in STRATEGIES:
        params = dict(current.params) if kind == current.type else {}
        params = {k: v for k, v in params.items() if k in PARAMS.get(kind, {})}
        raw_strategy = RewardStrategy(type=kind, normalized=False, params=params)
        rewards.append(
            StrategyReward(
                strategy=kind,
                normalized=RewardStrategy(type=kind, normalized=True, params=params)(result.results, ideal),
                raw=raw_strategy(result.results, ideal),
                ideal_raw=raw_strategy(ideal, ideal),
                current=kind == current.type,
            )
        )
    revealed = revealed_info or {}
    reveals = [(r.name, revealed[r.name]) for r in result.results if r.correct and r.name in revealed]
    return GradeReport(
        result=result,
        ideal_path=[r.name for r in ideal],
        rewards=rewards,
        reward=rubric.reward(result, answers),
        reveals=reveals,
    )
