"""The declared schema of rubric and scenario files (format version 1), as pydantic models.

``io.py`` checks each part of a parsed file against these models before it builds anything, so every type
error names the field path, the expected type and the value given (``rubrics.loading.schema_error``).
Numbers are strict: ``true`` is not a number and ``"0.5"`` is not either; a name is a string, never a date
or a list. What the models cannot see (a dependency key outside the answer domain, a cycle, an unknown
judge) is checked by the classes they feed.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, field_validator

from rubrics.messages import show
from rubrics.multistep.strategies import STRATEGIES

Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
"""A finite number (an integer is fine; ``true`` and ``"1"`` are not)."""
Positive = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0)]
"""A finite number above zero."""
Text = Annotated[StrictStr, Field(min_length=1)]
"""A non-empty string."""


class _Schema(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RuleJudgeSchema(_Schema):
    """``type: rules``: judges with each requirement's own rules."""

    type: Literal["rules"]
    """The judge kind."""


class LLMJudgeSchema(_Schema):
    """``type: llm``: an OpenAI-compatible endpoint."""

    type: Literal["llm"]
    """The judge kind."""
    base_url: Text
    """Endpoint root, e.g. ``http://127.0.0.1:8000/v1``."""
    model: Text
    """Model name sent with every request."""
    api_key_env: Text | None = None
    """Name of the environment variable holding the key."""
    max_concurrency: Annotated[StrictInt, Field(ge=1)] = 32
    """Requests in flight at once."""
    timeout_s: Positive = 60.0
    """Seconds allowed for one request."""
    max_attempts: Annotated[StrictInt, Field(ge=1)] = 5
    """Attempts per verdict."""


JUDGE_SCHEMAS: dict[str, type[_Schema]] = {"rules": RuleJudgeSchema, "llm": LLMJudgeSchema}
"""Judge schemas by their ``type``."""


class StrategySchema(_Schema):
    """The mapping form of ``reward_strategy``."""

    type: Literal[tuple(STRATEGIES)]  # type: ignore[valid-type]
    """One of the strategies of ``rubrics.multistep.strategies``."""
    normalized: StrictBool = True
    """Divide by the ideal walk's score."""
    level_bonus: Positive | None = None
    """``level_weighted``: the bonus per level."""
    growth: Positive | None = None
    """``progressive``: the factor per level."""


class RubricSchema(_Schema):
    """The top level of a rubric file (requirements, judges and the strategy are checked one by one)."""

    format_version: Literal[1] = 1
    """The file format's version."""
    name: StrictStr = ""
    """The rubric's name."""
    description: StrictStr = ""
    """What the rubric evaluates."""
    judges: dict[Text, Any] | None = None
    """Judge name -> its settings (default: one rule judge)."""
    default_judge: Text | None = None
    """The judge of requirements that name none."""
    reward_strategy: Any = "level_weighted"
    """A strategy name or a ``StrategySchema`` mapping."""
    roots: list[Text] | None = None
    """Where evaluation starts (default: every requirement nothing unlocks)."""
    requirements: Annotated[list[Any], Field(min_length=1)]
    """The requirements, each checked by its type's schema."""


class RequirementSchema(_Schema):
    """Fields every requirement has (a ``binary`` requirement has only these)."""

    name: Text
    """Unique, identifier-like name."""
    type: StrictStr = "binary"
    """The requirement type."""
    question: Text
    """What a judge is asked."""
    dependencies: dict[Any, list[Text] | None] | None = None
    """Answer -> the requirements it unlocks."""
    judge: Text | None = None
    """The rubric judge that answers it."""
    rules: dict[Any, dict[StrictStr, Any]] | None = None
    """Answer -> rule-judge match spec."""


class OptionSchema(_Schema):
    """One option of a discrete requirement."""

    value: Number
    """The answer value."""
    meaning: StrictStr = ""
    """What it means (shown to judges)."""


class DiscreteSchema(RequirementSchema):
    """``type: discrete``: one of a fixed set of numeric options."""

    options: Annotated[list[OptionSchema], Field(min_length=1)]
    """The allowed answers (bare numbers and ``{value: meaning}`` mappings are rewritten to this form)."""

    @field_validator("options")
    @classmethod
    def _distinct(cls, options: list[OptionSchema]) -> list[OptionSchema]:
        _reject_repeats([o.value for o in options], "option value")
        return options


class ContinuousSchema(RequirementSchema):
    """``type: continuous``: any number in ``[low, high]``."""

    low: Number = 0.0
    """Smallest allowed answer."""
    high: Number = 1.0
    """Largest allowed answer."""
    tolerance: Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0)] = 0.1
    """Largest distance from the ground truth that still counts as correct."""


class UnitVectorSchema(RequirementSchema):
    """``type: unit_vector``: a probability vector over labels."""

    labels: Annotated[list[Text], Field(min_length=2)]
    """The label of each position (a YAML list, not one comma-separated string)."""

    @field_validator("labels")
    @classmethod
    def _distinct(cls, labels: list[str]) -> list[str]:
        _reject_repeats(labels, "label")
        return labels


REQUIREMENT_SCHEMAS: dict[str, type[RequirementSchema]] = {
    "binary": RequirementSchema,
    "discrete": DiscreteSchema,
    "continuous": ContinuousSchema,
    "unit_vector": UnitVectorSchema,
}
"""Requirement schemas by their ``type``."""


class ScenarioSchema(_Schema):
    """One scenario's keys; ``prompt``, ``completion`` and ``answers`` are checked by ``io.py``, which knows
    their several accepted shapes."""

    name: StrictStr = ""
    """Unique name within its file."""
    description: StrictStr = ""
    """One line about the scenario."""
    hidden_description: StrictStr = ""
    """What really happened; never shown to the policy."""
    prompt: Any
    """A non-empty string or list of chat messages."""
    completion: Any = None
    """A reply to evaluate: a string or a list of chat messages."""
    answers: Any
    """Requirement name -> ground truth."""
    revealed_info: dict[Text, StrictStr] | None = None
    """Requirement name -> text shown once it is satisfied."""


class MessageSchema(BaseModel):
    """A chat message (other keys, such as ``name``, are kept)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant"]
    """Who speaks."""
    content: StrictStr
    """What is said."""


class AnswerSchema(_Schema):
    """The mapping form of one ground-truth answer."""

    answer: Any
    """The value, in the requirement's answer domain."""
    reasoning: StrictStr | None = None
    """Why (shown to judges beside the value)."""


def _reject_repeats(values: list[Any], what: str) -> None:
    first: dict[Any, int] = {}
    for i, value in enumerate(values):
        if value in first:
            raise ValueError(
                f"{what} {show(value)} is repeated (items {first[value]} and {i}); each must be distinct"
            )
        first[value] = i
