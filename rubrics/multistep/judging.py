"""Judges of a multi-step rubric: each answers one requirement about one reply.

Two kinds, mixed freely in one rubric:

- ``RuleJudge`` (YAML ``type: rules``): uses the requirement's own ``rules``, one match spec per answer
  value (``any``/``all``/``none`` phrases matched as whole words, ``regex``). The judged answer is the first
  value whose spec matches; no match is the verdict "none of the answers", which is never correct.
- ``LLMRequirementJudge`` (YAML ``type: llm``): asks the requirement's question on an OpenAI-compatible
  endpoint in the requirement's response format, showing the ground truth and its reasoning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from rubrics.judges.base import response_text
from rubrics.judges.client import LLMJudgeClient
from rubrics.judges.formats import JudgeResponse
from rubrics.judges.llm import LLMJudge
from rubrics.judges.rules import keyword_pattern
from rubrics.multistep.requirements import Requirement
from rubrics.types import Messages

RULE_KEYS = ("any", "all", "none", "regex")


@runtime_checkable
class RequirementJudge(Protocol):
    """Answers requirements: ``await judge.judge(requirement, prompt, completion, truth)``."""

    name: str
    """The judge's name in the rubric (requirements refer to it)."""

    def cannot_answer(self, requirement: Requirement) -> str | None:
        """Why this judge cannot answer ``requirement``, or None when it can."""
        ...

    async def judge(
        self,
        requirement: Requirement,
        prompt: Messages | str | None,
        completion: Messages | str | None,
        truth: Any,
    ) -> JudgeResponse:
        """The judged answer for ``requirement`` (``truth`` is ``{"answer": ..., "reasoning": ...}``)."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """Plain data for YAML."""
        ...


def check_rule_spec(requirement: str, key: Any, spec: Any) -> None:
    """Raise ``ValueError`` naming the requirement and field when a rule spec is malformed."""
    where = f"requirement {requirement!r}: field 'rules' ({key!r})"
    if not isinstance(spec, Mapping) or not spec:
        raise ValueError(f"{where} must be a mapping with any of {', '.join(RULE_KEYS)}")
    for k, v in spec.items():
        if k not in RULE_KEYS:
            raise ValueError(f"{where} has unknown key {k!r} (allowed: {', '.join(RULE_KEYS)})")
        if k == "regex":
            if not isinstance(v, str):
                raise ValueError(f"{where} 'regex' must be a string")
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"{where} 'regex' does not compile: {exc}") from exc
        elif not isinstance(v, list) or not v or not all(isinstance(p, str) and p.strip() for p in v):
            raise ValueError(f"{where} {k!r} must be a non-empty list of phrases")


def rule_matches(spec: Mapping[str, Any], text: str) -> bool:
    """Whether ``text`` satisfies every condition of a rule spec."""
    if "any" in spec and not any(keyword_pattern(p).search(text) for p in spec["any"]):
        return False
    if "all" in spec and not all(keyword_pattern(p).search(text) for p in spec["all"]):
        return False
    if "none" in spec and any(keyword_pattern(p).search(text) for p in spec["none"]):
        return False
    return not ("regex" in spec and not re.search(spec["regex"], text, re.IGNORECASE))


@dataclass
class RuleJudge:
    """Judges with each requirement's keyword and pattern rules (offline, deterministic)."""

    name: str = "rules"
    """The judge's name in the rubric."""

    def cannot_answer(self, requirement: Requirement) -> str | None:
        if not requirement.rules:
            return "it has no 'rules'"
        if requirement.kind == "unit_vector":
            return "rule judges cannot produce a probability vector"
        return None

    async def judge(
        self,
        requirement: Requirement,
        prompt: Messages | str | None,
        completion: Messages | str | None,
        truth: Any,
    ) -> JudgeResponse:
        text = response_text(completion)
        for value, spec in requirement.rules.items():
            if rule_matches(spec, text):
                return JudgeResponse(answer=value, reasoning=f"rule for {value!r} matched")
        return JudgeResponse(answer=None, reasoning="no rule matched the response")

    def to_dict(self) -> dict[str, Any]:
        return {"type": "rules"}


@dataclass
class LLMRequirementJudge:
    """Asks each requirement's question on an OpenAI-compatible endpoint (retries, cache, bounded concurrency)."""

    name: str
    """The judge's name in the rubric."""
    base_url: str
    """Endpoint root, e.g. ``http://127.0.0.1:8000/v1``."""
    model: str
    """Model name sent with every request."""
    api_key_env: str | None = None
    """Name of the environment variable that holds the key (never the key)."""
    max_concurrency: int = 32
    """Requests in flight at once."""
    timeout_s: float = 60.0
    """Time allowed for one request."""
    max_attempts: int = 5
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

    async def judge(
        self,
        requirement: Requirement,
        prompt: Messages | str | None,
        completion: Messages | str | None,
        truth: Any,
    ) -> JudgeResponse:
        llm = LLMJudge(self.client, requirement.question, requirement.response_format, name=requirement.name)
        return await llm(prompt, completion, truth)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"type": "llm", "base_url": self.base_url, "model": self.model}
        if self.api_key_env:
            data["api_key_env"] = self.api_key_env
        defaults = {"max_concurrency": 32, "timeout_s": 60.0, "max_attempts": 5}
        for key, default in defaults.items():
            if getattr(self, key) != default:
                data[key] = getattr(self, key)
        return data


def judge_from_dict(name: str, data: Mapping[str, Any]) -> RequirementJudge:
    """Build a judge from its YAML mapping; ``ValueError`` names the judge and the field."""
    if not isinstance(data, Mapping):
        raise ValueError(f"judge {name!r}: expected a mapping with a 'type'")
    kind = data.get("type")
    fields = {k: v for k, v in data.items() if k != "type"}
    if kind == "rules":
        if fields:
            raise ValueError(f"judge {name!r}: rule judges take no fields, got {sorted(fields)}")
        return RuleJudge(name=name)
    if kind == "llm":
        allowed = {"base_url", "model", "api_key_env", "max_concurrency", "timeout_s", "max_attempts"}
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(
                f"judge {name!r}: unknown field(s) {sorted(unknown)} (allowed: {sorted(allowed)})"
            )
        for required in ("base_url", "model"):
            if not isinstance(fields.get(required), str) or not fields[required]:
                raise ValueError(f"judge {name!r}: field {required!r} is required (a string)")
        return LLMRequirementJudge(name=name, **fields)
    raise ValueError(f"judge {name!r}: field 'type' must be 'rules' or 'llm', got {kind!r}")
