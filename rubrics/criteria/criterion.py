"""``Criterion``, a requirement with a weight, and what grading against criteria returns: a
``CriterionReport`` per criterion inside an ``EvaluationReport``.

A criterion's weight is positive for a desired trait, negative for an error (a MET negative criterion
subtracts its weight).
"""

from __future__ import annotations

from collections.abc import Mapping
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
