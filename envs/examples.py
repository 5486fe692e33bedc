"""``Example``: one dataset example, as environments, the trainer and evaluation pass it around.

An example holds exactly one of three things: a multi-step ``Scenario`` (``MultiStepMultiTurnEnv``), a
``CriteriaExample`` (``CriteriaEnv``), or a plain prompt with its answer and info (``SingleTurnEnv`` and the
seed-style datasets of hand-built dicts). Its accessors give what a rollout starts from (``prompt``,
``answer``, ``task``, ``info``) and the name intervals cluster by (``name``), whatever it holds.

A plain dict becomes an example in one place, ``Example.from_dict``: a line of a JSONL dataset, or a
hand-built dict handed to an environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rubrics.criteria.example import CriteriaExample
from rubrics.multistep.scenario import Scenario
from rubrics.types import Messages


@dataclass(frozen=True)
class Example:
    """One dataset example: exactly one of ``scenario``, ``criteria`` or ``text``."""

    scenario: Scenario | None = None
    """A multi-step scenario: its opening prompt, the ground truth of every requirement, its reveals."""
    criteria: CriteriaExample | None = None
    """A prompt graded against its own weighted criteria."""
    text: Messages | str | None = None
    """A plain prompt: a chat conversation or a string (single-turn datasets)."""
    plain_answer: Any = ""
    """A plain prompt's ground truth or other reference data for scoring (``Rollout.answer``)."""
    plain_info: dict[str, Any] = field(default_factory=dict)
    """A plain prompt's free-form metadata (``Rollout.info``; ``scenario`` names it for intervals)."""
    plain_task: str = "default"
    """A plain prompt's task identifier, for datasets that mix tasks."""

    def __post_init__(self) -> None:
        held = [self.scenario is not None, self.criteria is not None, self.text is not None]
        if sum(held) != 1:
            raise ValueError(
                f"an Example holds exactly one of a scenario, a criteria example or a prompt, got {sum(held)}"
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Example:
        """A plain prompt from a dict with ``prompt`` and optionally ``answer``, ``info`` and ``task`` (a
        line of a JSONL dataset, or a hand-built example).

        Raises:
            ValueError: no ``prompt``, or one that is neither a string nor a list of messages."""
        prompt = data.get("prompt")
        if not isinstance(prompt, str | list):
            raise ValueError(f"an example's prompt must be a string or a list of messages, got {prompt!r}")
        return cls(
            text=prompt,
            plain_answer=data.get("answer", ""),
            plain_info=dict(data.get("info") or {}),
            plain_task=str(data.get("task", "default")),
        )

    @property
    def prompt(self) -> Messages | str:
        """What the model is asked first: the scenario's opening, the criteria example's prompt (a string,
        or its conversation as messages), or the plain prompt."""
        if self.scenario is not None:
            return self.scenario.prompt
        if self.criteria is not None:
            c = self.criteria
            if isinstance(c.prompt, str):
                return c.prompt
            messages: Messages = [dict(m) for m in c.messages()]
            return messages
        assert self.text is not None  # __post_init__: exactly one is set
        return self.text

    @property
    def answer(self) -> Any:
        """What a rollout's ``answer`` holds: the scenario's ground truth (``Scenario.answers``),
        ``""`` for a criteria example (its criteria stay with the environment), or the plain answer."""
        if self.scenario is not None:
            return self.scenario.answers
        if self.criteria is not None:
            return ""
        return self.plain_answer

    @property
    def task(self) -> str:
        """``multistep``, ``criteria``, or the plain prompt's task."""
        if self.scenario is not None:
            return "multistep"
        return "criteria" if self.criteria is not None else self.plain_task

    @property
    def info(self) -> dict[str, Any]:
        """A fresh copy of what a rollout's ``info`` starts as: a scenario's name (``scenario``) and
        reveals (``revealed_info``), a criteria example's id (``scenario``), or the plain info."""
        if self.scenario is not None:
            return {"scenario": self.scenario.name, "revealed_info": dict(self.scenario.revealed_info)}
        if self.criteria is not None:
            return {"scenario": self.criteria.id}
        return dict(self.plain_info)

    @property
    def name(self) -> str:
        """The name intervals cluster rollouts by: the scenario's name, the criteria example's id, or a plain
        prompt's ``info["scenario"]`` (empty when it has none)."""
        return str(self.info.get("scenario", ""))
