"""Scenarios: a prompt, the ground truth of every requirement on its path, and what gets revealed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from difflib import get_close_matches
from typing import Annotated, Any, Protocol

from pydantic import StrictStr

from rubrics.error_text import show
from rubrics.multistep.dag import Graph
from rubrics.multistep.files import InFile, Text
from rubrics.multistep.walk import ground_truth_walk
from rubrics.types import Messages, State


@dataclass(frozen=True)
class ScenarioProblem:
    """Something wrong with a scenario, found by ``Scenario.problems``."""

    where: tuple[Any, ...]
    """The field inside the scenario (``("answers", "scene_safety")``)."""
    reason: str
    """What is wrong, in the loaders' message style."""
    warning: bool = False
    """True when the scenario still works (``validate --strict`` refuses it anyway)."""


class ScenarioError(ValueError):
    """A scenario does not fit its rubric; ``problem`` says where and why."""

    def __init__(self, problem: ScenarioProblem, name: str = "") -> None:
        self.problem = problem
        """The first problem found."""
        where = ".".join(str(part) for part in problem.where)
        label = f"scenario {name!r}" if name else "scenario"
        super().__init__(f"{label}: {where}: {problem.reason}")


class HasGraph(Protocol):
    """Anything holding a requirement DAG (a ``MultiStepRubric``)."""

    @property
    def graph(self) -> Graph:
        """The validated DAG."""
        ...


@dataclass(kw_only=True)
class Scenario:
    """One situation to act in, with the answers a judge compares the model's replies against; its fields
    are those of a scenario in a file (``rubrics.multistep.files.file_schema``; ``scenario_io`` checks
    ``prompt``, ``completion`` and ``answers``, which have several accepted shapes)."""

    name: StrictStr = ""
    """Unique name within its file."""
    description: StrictStr = ""
    """One line about the scenario."""
    hidden_description: StrictStr = ""
    """What really happened; never shown to the policy (used to generate scenarios)."""
    prompt: Annotated[Messages | str, InFile(Any)]
    """What the policy sees first: a non-empty string or list of chat messages."""
    completion: Annotated[Messages | str | None, InFile(Any)] = None
    """A reply to evaluate (for offline scoring; environments generate their own)."""
    answers: Annotated[dict[str, dict[str, Any]], InFile(Any)]
    """Ground truth per requirement: ``answers[name] = {"answer": value, "reasoning": text}``."""
    revealed_info: Annotated[dict[str, str], InFile(dict[Text, StrictStr] | None)] = field(
        default_factory=dict
    )
    """Requirement name -> text shown to the policy once that requirement is satisfied."""

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

    def problems(self, rubric: HasGraph) -> list[ScenarioProblem]:
        """Everything wrong with this scenario for ``rubric``; answers are put in canonical form on the way
        (``1`` becomes ``1.0``).

        Errors: an answer or a reveal naming an unknown requirement, an answer outside its requirement's
        domain, a reveal for a requirement the scenario does not answer. Warnings (``strict`` makes them
        errors): a reveal that no walk can ever show, because its requirement is off the ground-truth path
        or is where that path ends (a reveal is shown when a requirement unlocks the next ones). Warnings,
        not errors, because such a scenario still trains correctly (the text is simply never used) and
        generated scenarios often carry reveals for every requirement; ``rubric validate --strict`` refuses
        them for hand-written files, where they usually mean a lost branch."""
        found: list[ScenarioProblem] = []
        requirements = rubric.graph.requirements
        for name, entry in self.answers.items():
            if name not in requirements:
                found.append(ScenarioProblem(("answers", name), _unknown(name, requirements)))
                continue
            try:
                entry["answer"] = requirements[name].validate_answer(entry["answer"])
            except ValueError:
                expected = requirements[name].response_format.describe_answer().rstrip(".")
                found.append(
                    ScenarioProblem(
                        ("answers", name),
                        f"outside the answer domain of requirement {name!r} "
                        f"(expected {expected}, got {show(entry['answer'])})",
                    )
                )
        for name in self.revealed_info:
            if name not in requirements:
                found.append(ScenarioProblem(("revealed_info", name), _unknown(name, requirements)))
            elif name not in self.answers:
                found.append(
                    ScenarioProblem(
                        ("revealed_info", name),
                        f"requirement {name!r} has no answer in this scenario, so its text is never shown "
                        f"(expected an entry answers.{name})",
                    )
                )
        if not found:
            found.extend(self._unshown_reveals(rubric))
        return found

    def validate(self, rubric: HasGraph, strict: bool = False) -> list[ScenarioProblem]:
        """Raise ``ScenarioError`` for the first error (or warning, when ``strict``); return the warnings."""
        found = self.problems(rubric)
        for problem in found:
            if strict or not problem.warning:
                raise ScenarioError(problem, self.name)
        return found

    def _unshown_reveals(self, rubric: HasGraph) -> list[ScenarioProblem]:
        graph = rubric.graph
        path = ground_truth_walk(graph, self.answers).path
        found = []
        for name in self.revealed_info:
            if name not in path:
                why = (
                    f"requirement {name!r} is not on this scenario's ground-truth path ({' -> '.join(path)})"
                )
            elif not graph.requirements[name].route(self.answers[name]["answer"]):
                why = f"requirement {name!r} ends this scenario's ground-truth path (it unlocks nothing)"
            else:
                continue
            found.append(ScenarioProblem(("revealed_info", name), f"never shown: {why}", warning=True))
        return found

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


def _unknown(name: str, requirements: Mapping[str, Any]) -> str:
    close = get_close_matches(name, list(requirements), n=3)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
    return f"unknown requirement {name!r} (not in the rubric{hint})"
