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
  requirement's question on an OpenAI-compatible endpoint in the requirement's response format, showing
  the ground truth and its reasoning.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, runtime_checkable

from pydantic import Field, StrictInt

from rubrics.judges.base import Judge
from rubrics.judges.client import LLMJudgeClient
from rubrics.judges.llm import LLMJudge
from rubrics.judges.rules import RulesJudge
from rubrics.multistep.files import InFile, Positive, Text
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

    def to_dict(self) -> dict[str, Any]:
        return {"type": "rules"}


@dataclass
class LLMRequirementJudge:
    """Asks each requirement's question on an OpenAI-compatible endpoint (retries, cache, bounded concurrency)."""

    name: Annotated[str, InFile(None)]
    """The judge's name in the rubric (its key under ``judges``, not a field in the file)."""
    base_url: Text
    """Endpoint root, e.g. ``http://127.0.0.1:8000/v1``."""
    model: Text
    """Model name sent with every request."""
    api_key_env: Text | None = None
    """Name of the environment variable that holds the key (never the key)."""
    max_concurrency: Annotated[StrictInt, Field(ge=1)] = 32
    """Requests in flight at once."""
    timeout_s: Positive = 60.0
    """Seconds allowed for one request."""
    max_attempts: Annotated[StrictInt, Field(ge=1)] = 5
    """Attempts per verdict."""

    def __post_init__(self) -> None:
        self._client: LLMJudgeClient | None = None

    @property
    def client(self) -> LLMJudgeClient:
        """The endpoint client, made on first use (so loading a rubric never needs a key)."""
        if self._client is None:
            self._client = LLMJudgeClient(
                self.base_url,
                self.model,
                self.api_key_env,
                max_concurrency=self.max_concurrency,
                timeout_s=self.timeout_s,
                max_attempts=self.max_attempts,
            )
        return self._client

    def cannot_answer(self, requirement: Requirement) -> str | None:
        return None

    def judge_for(self, requirement: Requirement) -> Judge:
        return LLMJudge(self.client, requirement.question, requirement.response_format, name=requirement.name)

    def to_dict(self) -> dict[str, Any]:
        """The file's fields, those at their default left out."""
        data: dict[str, Any] = {"type": "llm"}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name != "name" and (
                field.default is dataclasses.MISSING or value not in (field.default, None, "")
            ):
                data[field.name] = value
        return data


JUDGE_TYPES: dict[str, type[RuleRequirementJudge | LLMRequirementJudge]] = {
    "rules": RuleRequirementJudge,
    "llm": LLMRequirementJudge,
}
"""Judge classes by their YAML ``type``."""
