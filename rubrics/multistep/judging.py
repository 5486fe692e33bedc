"""Judges of a multi-step rubric: the judges a rubric file declares, each of which gives, for a requirement,
a ``rubrics.judges.Judge`` (``judge_for``): the one judge concept that reward functions use too. The walk
asks ``await judge.judge_for(requirement)(prompt, completion, truth)``.

Two kinds, mixed freely in one rubric:

- ``RuleRequirementJudge`` (YAML ``type: rules``): a ``rubrics.judges.rules.RulesJudge`` over the
  requirement's own ``rules``, one match spec per answer value (``any``/``all``/``none``/``negated``
  phrases, ``regex``, the ``negation_aware`` switch; ``rubrics.judges.matching.rule_matches``, the matcher
  of every rule). The judged answer is the first value whose spec matches; no match is the verdict "none of
  the answers", which is never correct. What a rule means is a contract with its author: a ``regex``
  matches as written, always; the negation heuristic applies to phrase lists only, and a rule switches it
  off with ``negation_aware: false``. ``rubrics.multistep.lint`` warns about rules that cannot mean what
  they seem to.
- ``LLMRequirementJudge`` (YAML ``type: llm``): a ``rubrics.judges.llm.LLMJudge`` that asks the
  requirement's question on an OpenAI-compatible endpoint (a ``rubrics.judges.endpoint.JudgeEndpoint``) in
  the requirement's response format, showing the ground truth and its reasoning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Protocol, runtime_checkable

from rubrics.judges.base import Judge
from rubrics.judges.client import LLMJudgeClient
from rubrics.judges.endpoint import JudgeEndpoint
from rubrics.judges.llm import LLMJudge
from rubrics.judges.rules import RulesJudge
from rubrics.multistep.files import Flat, InFile
from rubrics.multistep.requirements import Requirement


@runtime_checkable
class RequirementJudge(Protocol):
    """A judge a rubric declares: for each requirement it can answer, a ``Judge``
    (``await judge.judge_for(requirement)(prompt, completion, truth)``, ``truth`` being
    ``{"answer": ..., "reasoning": ...}``)."""

    name: str
    """The judge's name in the rubric (requirements refer to it)."""

    def cannot_answer(self, requirement: Requirement) -> str | None:
        """Why this judge cannot answer ``requirement``, or None when it can."""
        ...

    def judge_for(self, requirement: Requirement) -> Judge:
        """The judge of ``requirement``: named after it, answering in its response format."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """Plain data for YAML."""
        ...


def rule_phrases(requirement: Requirement) -> dict[Any, list[str]]:
    """The phrases a rule judge looks for, per answer value: each answer's ``any`` then ``all`` phrases,
    in file order (``negated``, ``none`` and ``regex`` are left out: they are not things to say).

    The first phrase is the canonical way to say the answer: in the shipped rubrics it satisfies the
    answer's rule on its own (a test checks it), so a scripted policy can say it."""
    return {
        value: list(dict.fromkeys([*spec.get("any", []), *spec.get("all", [])]))
        for value, spec in requirement.rules.items()
    }


@dataclass
class RuleRequirementJudge:
    """Judges with each requirement's keyword and pattern rules (offline, deterministic)."""

    name: Annotated[str, InFile(None)] = "rules"
    """The judge's name in the rubric (its key under ``judges``, not a field in the file)."""

    def cannot_answer(self, requirement: Requirement) -> str | None:
        if not requirement.rules:
            return "it has no 'rules'"
        if requirement.kind == "unit_vector":
            return "rule judges cannot produce a probability vector"
        return None

    def judge_for(self, requirement: Requirement) -> Judge:
        return RulesJudge(requirement.rules, requirement.response_format, name=requirement.name)

    @classmethod
    def from_file(cls, name: str, settings: dict[str, Any]) -> RuleRequirementJudge:
        """The judge a file's checked part declares (it has no settings)."""
        return cls(name=name, **settings)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "rules"}


@dataclass
class LLMRequirementJudge:
    """Asks each requirement's question on an OpenAI-compatible endpoint (retries, cache, bounded
    concurrency).

    A file writes the endpoint's fields flat under the judge's name (``type: llm``, ``base_url``, ``model``,
    ...), those at their default left out."""

    name: Annotated[str, InFile(None)]
    """The judge's name in the rubric (its key under ``judges``, not a field in the file)."""
    endpoint: Annotated[JudgeEndpoint, Flat()]
    """Where and how the questions are asked."""

    def __post_init__(self) -> None:
        self._client: LLMJudgeClient | None = None

    @classmethod
    def from_file(cls, name: str, settings: dict[str, Any]) -> LLMRequirementJudge:
        """The judge a file's checked part declares (the endpoint's fields, flat)."""
        return cls(name, JudgeEndpoint(**settings))

    @property
    def client(self) -> LLMJudgeClient:
        """The endpoint client, made on first use (so loading a rubric never needs a key)."""
        if self._client is None:
            self._client = LLMJudgeClient.from_endpoint(self.endpoint)
        return self._client

    def retarget(self, **settings: Any) -> None:
        """Point this judge at another endpoint: ``settings`` replace the endpoint's fields (``base_url``,
        ``model``, ...; ``JudgeEndpoint.replaced``); the client is made anew on next use. ``envs.build`` uses
        it for the run config's ``env.judge_base_url`` and ``env.judge_model``."""
        self.endpoint, self._client = self.endpoint.replaced(**settings), None

    def cannot_answer(self, requirement: Requirement) -> str | None:
        return None

    def judge_for(self, requirement: Requirement) -> Judge:
        return LLMJudge(self.client, requirement.question, requirement.response_format, name=requirement.name)

    def to_dict(self) -> dict[str, Any]:
        """The file's fields, those at their default left out."""
        defaults = JudgeEndpoint.defaults()
        data: dict[str, Any] = {"type": "llm"}
        for key, value in self.endpoint.model_dump().items():
            if key not in defaults or value not in (defaults[key], None, ""):
                data[key] = value
        return data


JUDGE_TYPES: dict[str, type[RuleRequirementJudge | LLMRequirementJudge]] = {
    "rules": RuleRequirementJudge,
    "llm": LLMRequirementJudge,
}
"""Judge classes by their YAML ``type``."""
