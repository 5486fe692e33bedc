"""Scenarios: a prompt, the ground truth of every requirement on its path, and what gets revealed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from rubrics.multistep.dag import Graph
from rubrics.types import Messages, State


class HasGraph(Protocol):
    """Anything holding a requirement DAG (a ``MultiStepRubric``)."""

    @property
    def graph(self) -> Graph:
        """The validated DAG."""
        ...


@dataclass
class Scenario:
    """One situation to act in, with the answers a judge compares the model's replies against."""

    prompt: Messages | str
    """What the policy sees first."""
    answers: dict[str, dict[str, Any]]
    """Ground truth per requirement: ``answers[name] = {"answer": value, "reasoning": text}``."""
    completion: Messages | str | None = None
    """A reply to evaluate (for offline scoring; environments generate their own)."""
    name: str = ""
    """Unique name within its file."""
    description: str = ""
    """One line about the scenario."""
    revealed_info: dict[str, str] = field(default_factory=dict)
    """Requirement name -> text shown to the policy once that requirement is satisfied."""
    hidden_description: str = ""
    """What really happened; never shown to the policy (used to generate scenarios)."""

    def __post_init__(self) -> None:
        label = f"scenario {self.name!r}" if self.name else "scenario"
        if not isinstance(self.prompt, str | list) or not self.prompt:
            raise ValueError(f"{label}: field 'prompt' must be a non-empty string or list of messages")
        if not isinstance(self.answers, Mapping):
            raise ValueError(f"{label}: field 'answers' must map requirement names to answers")
        normal: dict[str, dict[str, Any]] = {}
        for key, entry in self.answers.items():
            if isinstance(entry, Mapping):
                if "answer" not in entry:
                    raise ValueError(f"{label}: field 'answers' entry {key!r} has no 'answer'")
                unknown = set(entry) - {"answer", "reasoning"}
                if unknown:
                    raise ValueError(
                        f"{label}: field 'answers' entry {key!r} has unknown key(s) {sorted(unknown)}"
                    )
                normal[str(key)] = {
                    "answer": entry["answer"],
                    "reasoning": str(entry.get("reasoning", "") or ""),
                }
            else:
                normal[str(key)] = {"answer": entry, "reasoning": ""}
        self.answers = normal
        if not isinstance(self.revealed_info, Mapping) or not all(
            isinstance(v, str) for v in self.revealed_info.values()
        ):
            raise ValueError(f"{label}: field 'revealed_info' must map requirement names to text")
        self.revealed_info = {str(k): v for k, v in self.revealed_info.items()}

    def validate(self, rubric: HasGraph) -> None:
        """Check against a rubric: known names, answers in each domain, reveals only for answered ones.

        Answers are put in their canonical form (``1`` becomes ``1.0``)."""
        label = f"scenario {self.name!r}" if self.name else "scenario"
        requirements = rubric.graph.requirements
        for req_name, entry in self.answers.items():
            if req_name not in requirements:
                raise ValueError(f"{label}: field 'answers' names unknown requirement {req_name!r}")
            try:
                entry["answer"] = requirements[req_name].validate_answer(entry["answer"])
            except ValueError as exc:
                raise ValueError(f"{label}: field 'answers' ({req_name!r}): {exc}") from exc
        for req_name in self.revealed_info:
            if req_name not in requirements:
                raise ValueError(f"{label}: field 'revealed_info' names unknown requirement {req_name!r}")
            if req_name not in self.answers:
                raise ValueError(
                    f"{label}: field 'revealed_info' ({req_name!r}) is for a requirement the scenario does not answer"
                )

    def to_state(self) -> State:
        """A rollout state for scoring: ``answer`` holds the ground truth, ``info`` the rest."""
        state: State = {
            "prompt": self.prompt,
            "answer": self.answers,
            "task": "multistep",
            "info": {
                "scenario": self.name,
                "description": self.description,
                "revealed_info": dict(self.revealed_info),
            },
        }
        if self.completion is not None:
            state["completion"] = self.completion
        return state

    def to_dict(self) -> dict[str, Any]:
        """Plain data for YAML/JSONL (empty optional fields left out)."""
        data: dict[str, Any] = {"name": self.name} if self.name else {}
        if self.description:
            data["description"] = self.description
        if self.hidden_description:
            data["hidden_description"] = self.hidden_description
        data["prompt"] = self.prompt
        if self.completion is not None:
            data["completion"] = self.completion
        data["answers"] = {
            k: (
                {"answer": v["answer"], "reasoning": v["reasoning"]}
                if v["reasoning"]
                else {"answer": v["answer"]}
            )
            for k, v in self.answers.items()
        }
        if self.revealed_info:
            data["revealed_info"] = dict(self.revealed_info)
        return data
