"""The schema of rubric and scenario files (format version 1): each part of a file and the pydantic model it
is checked against.

A part that builds one class (a requirement, a judge, the strategy's mapping, a scenario) is checked against
the class's own fields (``files.file_schema``). The rest are parts no class holds as written: the top level
of a rubric file (``MultiStepRubric`` takes it as arguments), a chat message and an answer's mapping form.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from rubrics.multistep.files import FileSchema, Positive, Text, file_schema
from rubrics.multistep.judging import JUDGE_TYPES
from rubrics.multistep.requirements import REQUIREMENT_TYPES
from rubrics.multistep.scenario import Scenario
from rubrics.multistep.strategies import PARAMS, RewardStrategy

REQUIREMENT_SCHEMAS: dict[str, type[FileSchema]] = {
    kind: file_schema(cls, tag="type", tag_after="name") for kind, cls in REQUIREMENT_TYPES.items()
}
"""Requirement schemas by their ``type``."""

JUDGE_SCHEMAS: dict[str, type[FileSchema]] = {
    kind: file_schema(cls, tag="type") for kind, cls in JUDGE_TYPES.items()
}
"""Judge schemas by their ``type``."""

StrategySchema = file_schema(
    RewardStrategy, more={param: (Positive | None, None) for by_type in PARAMS.values() for param in by_type}
)
"""The mapping form of ``reward_strategy``: ``type``, ``normalized`` and the strategies' parameters."""

ScenarioSchema = file_schema(Scenario)
"""One scenario's keys."""


class RubricSchema(FileSchema):
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


class MessageSchema(BaseModel):
    """A chat message (other keys, such as ``name``, are kept)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant"]
    """Who speaks."""
    content: StrictStr
    """What is said."""


class AnswerSchema(FileSchema):
    """The mapping form of one ground-truth answer."""

    answer: Any
    """The value, in the requirement's answer domain."""
    reasoning: StrictStr | None = None
    """Why (shown to judges beside the value)."""
