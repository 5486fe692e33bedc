"""What a ``generate_fn`` returns, one schema per grader; field names match the public ``rubric`` library
(2.x), so generate functions written for it work here unchanged.

A ``generate_fn`` may return the schema object itself, a plain dict of its fields, or the model's raw JSON
text (a code fence or surrounding prose is tolerated).
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rubrics.judges.formats import REASON_MAX_CHARS, JudgeFormatError, extract_json_object

Status = Literal["MET", "UNMET"]
M = TypeVar("M", bound=BaseModel)


def _explanation() -> Any:
    """An ``explanation`` field: any length is parsed, and its JSON schema (sent to a judge server as the
    reply's grammar) holds it to ``REASON_MAX_CHARS``."""
    return Field("", json_schema_extra={"maxLength": REASON_MAX_CHARS})


def _status(value: Any) -> Any:
    return value.strip().upper() if isinstance(value, str) else value


class PerCriterionOutput(BaseModel):
    """The verdict on one criterion (``PerCriterionGrader``)."""

    model_config = ConfigDict(extra="ignore")

    explanation: str = _explanation()
    """Why the criterion is met or not."""
    criterion_status: Status
    """``MET`` or ``UNMET``."""

    _upper = field_validator("criterion_status", mode="before")(_status)


class CriterionEvaluation(BaseModel):
    """The verdict on one criterion inside a one-shot answer."""

    model_config = ConfigDict(extra="ignore")

    criterion_idx: int = Field(ge=0)
    """0-based index of the criterion in the rubric."""
    explanation: str = _explanation()
    """Why the criterion is met or not."""
    criterion_status: Status
    """``MET`` or ``UNMET``."""

    _upper = field_validator("criterion_status", mode="before")(_status)


class OneShotOutput(BaseModel):
    """Verdicts on every criterion at once (``PerCriterionOneShotGrader``)."""

    model_config = ConfigDict(extra="ignore")

    criteria_evaluations: list[CriterionEvaluation]
    """One evaluation per criterion, each naming its 0-based index."""


class RubricAsJudgeOutput(BaseModel):
    """One holistic score (``RubricAsJudgeGrader``)."""

    model_config = ConfigDict(extra="ignore")

    explanation: str = _explanation()
    """Why this score."""
    overall_score: float = Field(allow_inf_nan=False)
    """0 to 100; a value outside is kept as ``llm_raw_score`` and clamped in ``score``."""


class GraderOutputError(ValueError):
    """A ``generate_fn`` returned something that does not fit its grader's schema."""


def coerce_output(schema: type[M], value: Any) -> M:
    """``value`` (the schema object, a dict or JSON text) as ``schema``, or ``GraderOutputError``."""
    if isinstance(value, schema):
        return value
    try:
        if isinstance(value, BaseModel):
            value = value.model_dump()
        elif isinstance(value, str):
            value = extract_json_object(value)
        if not isinstance(value, dict):
            raise GraderOutputError(
                f"generate_fn returned {type(value).__name__}; expected {schema.__name__}, "
                "a dict or JSON text"
            )
        return schema.model_validate(value)
    except (ValidationError, JudgeFormatError) as exc:
        raise GraderOutputError(f"generate_fn output is not a valid {schema.__name__}: {exc}") from exc
