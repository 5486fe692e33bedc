"""``Criterion``, a requirement with a weight, and what grading against criteria returns: a
``CriterionReport`` per criterion inside an ``EvaluationReport``.

A criterion's weight is positive for a desired trait, negative for an error (a MET negative criterion
subtracts its weight).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rubrics.judges.matching import check_rule_spec, rule_matches

ToGrade = str | Mapping[str, str]
"""What a grader reads: the response text, or ``{"thinking": ..., "output": ...}``."""


class Criterion(BaseModel):
    """One weighted requirement."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weight: float = Field(strict=True, allow_inf_nan=False)
    """Points when MET: positive for a desired trait, negative for an error."""
    requirement: str = Field(min_length=1)
    """What the response must do (or, for a negative weight, the error it must not make)."""
    name: str | None = None
    """Optional short name, used as the metric key."""
    tags: tuple[str, ...] = ()
    """Labels for per-tag scores (HealthBench's ``axis:accuracy``, ``level:example``, ...); no duplicates."""
    rule: dict[str, Any] | None = None
    """A rule that judges this criterion offline instead of the LLM: the match spec of the multi-step rules
    (``any``/``all``/``none``/``negated`` phrases, ``regex``, ``negation_aware``; ``rule_matches``). MET when
    the response matches it."""

    @field_validator("tags")
    @classmethod
    def _distinct_tags(cls, tags: tuple[str, ...]) -> tuple[str, ...]:
        repeated = sorted({t for t in tags if tags.count(t) > 1})
        if repeated:
            raise ValueError(f"repeated tag(s) {', '.join(map(repr, repeated))}")
        return tags

    @field_validator("rule")
    @classmethod
    def _valid_rule(cls, rule: dict[str, Any] | None) -> dict[str, Any] | None:
        if rule is not None:
            try:
                check_rule_spec("", "MET", rule)
            except ValueError as exc:  # "requirement '': field 'rules' ('MET') must ..." -> "must ..."
                raise ValueError(str(exc).split(") ", 1)[-1]) from None
        return rule

    def rule_verdict(self, text: str) -> bool:
        """Whether ``text`` matches this criterion's rule (a criterion without one raises ``ValueError``)."""
        if self.rule is None:
            raise ValueError(f"criterion {self.name or self.requirement[:40]!r} has no rule")
        return rule_matches(self.rule, text)


class CriterionReport(Criterion):
    """A criterion with its verdict."""

    verdict: Literal["MET", "UNMET"]
    """``MET``: the requirement holds (for a negative criterion: the error was made)."""
    reason: str = ""
    """The grader's explanation."""
    judged_by: Literal["rule", "llm"] = "llm"
    """Who gave the verdict: the criterion's own rule, or the autograder."""


class EvaluationReport(BaseModel):
    """The result of grading one response."""

    score: float
    """0 to 1 with ``normalize=True``, otherwise ``raw_score``."""
    raw_score: float
    """The weighted sum, comparable across graders."""
    llm_raw_score: float
    """The model's 0-100 score for ``RubricAsJudgeGrader``; otherwise ``raw_score``."""
    report: list[CriterionReport] | None = None
    """Per-criterion verdict, requirement and reason; None for ``RubricAsJudgeGrader``."""


ALL_ZERO = (
    "every criterion's weight is 0: nothing can be earned or lost, every score would be 0/0 "
    "(expected at least one non-zero weight)"
)
"""Why a criteria list whose weights are all zero is refused."""


class WeightTotalError(ValueError):
    """The positive (or the negative) weights of a criteria list add up past the largest float, so no score
    could be computed; ``index`` is the criterion at which the total first overflows."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(reason)
        self.index = index
        """The position, in the criteria list, of the weight that takes the total past the largest float."""


def check_weight_totals(weights: Sequence[float]) -> None:
    """Refuse weights whose positive or negative total is not a finite number: each weight may be finite
    while their sum is not (``1e308 + 1e308``), and every score of such a list would fail.

    Raises:
        WeightTotalError: naming the first weight at which a total overflows."""
    totals = {"positive": 0.0, "negative": 0.0}
    for index, weight in enumerate(weights):
        sign = "positive" if weight > 0 else "negative"
        totals[sign] += weight
        if not math.isfinite(totals[sign]):
            raise WeightTotalError(
                index,
                f"the {sign} weights up to this one add up to {totals[sign]:g}, out of the range of a "
                f"float (±{sys.float_info.max:.4g}), so no score could be computed (expected a finite "
                f"{sign} total)",
            )
