"""``CriteriaExample``: a prompt that carries its own weighted criteria (RaR, HealthBench, RLCF's checklists),
the unit of a ``criteria`` environment's dataset.

The project's own file format is one ``CriteriaExample`` per JSONL line (or per item of a JSON list), its
fields exactly as below; ``envs.criteria.data`` reads it and the HealthBench and RaR formats into it
(``docs/criteria_data.md`` maps their fields).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rubrics.criteria.autograders.scoring import positive_points
from rubrics.criteria.criterion import ALL_ZERO, Criterion, check_weight_totals


class ChatMessage(BaseModel):
    """One message of a prompt's conversation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant"]
    """Who speaks."""
    content: str
    """What is said."""


class CriteriaExample(BaseModel):
    """A prompt with its own criteria."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    """A stable name: the cluster of the intervals, the key of paired comparisons and of the verdict cache."""
    prompt: str | tuple[ChatMessage, ...]
    """The user's message, or the conversation so far (its last message is the user's)."""
    criteria: tuple[Criterion, ...] = Field(min_length=1)
    """The weighted criteria a reply is graded on; a negative weight marks a pitfall."""
    reference_answer: str | None = None
    """A reference answer, shown to the LLM judge when the environment says so; never to the policy."""
    tags: tuple[str, ...] = ()
    """Example-level tags (HealthBench's ``theme:...``): the example's score counts towards each."""

    @field_validator("prompt")
    @classmethod
    def _ends_with_user(cls, prompt: str | tuple[ChatMessage, ...]) -> str | tuple[ChatMessage, ...]:
        if isinstance(prompt, str):
            if not prompt.strip():
                raise ValueError("is empty")
        elif not prompt or prompt[-1].role != "user":
            raise ValueError("a conversation must end with a user message")
        return prompt

    @field_validator("criteria")
    @classmethod
    def _some_weight(cls, criteria: tuple[Criterion, ...]) -> tuple[Criterion, ...]:
        if not any(c.weight for c in criteria):
            raise ValueError(ALL_ZERO)
        check_weight_totals([c.weight for c in criteria])
        return criteria

    @property
    def query(self) -> str:
        """The last user message: what the judge is told the response answers."""
        return self.prompt if isinstance(self.prompt, str) else self.prompt[-1].content

    @property
    def positive_points(self) -> float:
        """The sum of the positive weights: what a reply can earn (HealthBench's denominator)."""
        return positive_points([c.weight for c in self.criteria])

    def messages(self) -> list[dict[str, str]]:
        """The prompt as chat messages."""
        if isinstance(self.prompt, str):
            return [{"role": "user", "content": self.prompt}]
        return [m.model_dump() for m in self.prompt]

    def needs_llm(self) -> bool:
        """Whether some criterion has no rule (so an LLM judge must grade it)."""
        return any(c.rule is None for c in self.criteria)

    def to_dict(self) -> dict[str, Any]:
        """The project's own format: one line of a criteria JSONL."""
        return self.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
