"""Judges of a multi-step rubric: each answers one requirement about one reply.

Two kinds, mixed freely in one rubric:

- ``RuleJudge`` (YAML ``type: rules``): uses the requirement's own ``rules``, one match spec per answer
  value (``any``/``all``/``none``/``negated`` phrases, ``regex``, the ``negation_aware`` switch; see
  ``rule_matches``). The judged answer is the first value whose spec matches (``rule_verdict``); no match is
  the verdict "none of the answers", which is never correct.

What a rule means is a contract with its author: a ``regex`` matches as written, always; the negation
heuristic (``is_negated``) applies to phrase lists only, and a rule switches it off with
``negation_aware: false``. ``rubrics.multistep.lint`` warns about rules that cannot mean what they seem to.
- ``LLMRequirementJudge`` (YAML ``type: llm``): asks the requirement's question on an OpenAI-compatible
  endpoint in the requirement's response format, showing the ground truth and its reasoning.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any, Protocol, runtime_checkable

from pydantic import Field, StrictInt

from rubrics.judges.base import response_text
from rubrics.judges.client import LLMJudgeClient
from rubrics.judges.formats import JudgeResponse
from rubrics.judges.llm import LLMJudge
from rubrics.judges.rules import keyword_pattern
from rubrics.multistep.files import InFile, Positive, Text
from rubrics.multistep.requirements import Requirement
from rubrics.types import Messages

RULE_KEYS = ("any", "all", "none", "negated", "regex")
"""The match keys of one answer's rule spec (``rule_matches`` says what each means)."""

RULE_SWITCHES = ("negation_aware",)
"""The switches of one answer's rule spec, booleans beside the match keys: ``negation_aware`` (default
true) says whether a negator before a phrase keeps it from counting as said."""

NEGATORS = frozenset({
    "not", "no", "non", "never", "nothing", "without", "nor", "neither", "none", "cannot", "cant", "dont",
    "doesnt", "didnt", "isnt", "arent", "wasnt", "werent", "hasnt", "havent", "wont"
})  # fmt: skip
"""Words that negate a phrase that follows them closely (apostrophes are dropped before the lookup, and
any word ending in ``n't`` counts too)."""

NEGATION_WINDOW = 4
"""How many words before a phrase a negator may stand and still negate it."""

_CLAUSE_END = re.compile(r"[.;:!?,()\n]|\b(?:and|but|so|then|because|while|although|however)\b", re.I)
"""Where a negation's scope ends: punctuation and the conjunctions that start a new assertion."""


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
    if not isinstance(spec, Mapping) or not set(spec) - set(RULE_SWITCHES):
        raise ValueError(f"{where} must be a mapping with any of {', '.join(RULE_KEYS)}")
    allowed = ", ".join((*RULE_KEYS, *RULE_SWITCHES))
    for k, v in spec.items():
        if k not in RULE_KEYS and k not in RULE_SWITCHES:
            raise ValueError(f"{where} has unknown key {k!r} (allowed: {allowed})")
        if k in RULE_SWITCHES:
            if not isinstance(v, bool):
                raise ValueError(f"{where} {k!r} must be true or false, got {v!r}")
        elif k == "regex":
            if not isinstance(v, str):
                raise ValueError(f"{where} 'regex' must be a string")
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"{where} 'regex' does not compile: {exc}") from exc
        elif not isinstance(v, list) or not v or not all(isinstance(p, str) and p.strip() for p in v):
            raise ValueError(f"{where} {k!r} must be a non-empty list of phrases")
    if "negated" in spec and not negation_aware(spec):
        raise ValueError(f"{where} 'negated' needs the negation heuristic (remove 'negation_aware: false')")


def negation_aware(spec: Mapping[str, Any]) -> bool:
    """Whether a rule's phrases count only where no negator governs them (``negation_aware``, default true)."""
    return spec.get("negation_aware", True) is not False


def is_negated(text: str, start: int) -> bool:
    """Whether a negator stands within ``NEGATION_WINDOW`` words before ``text[start:]`` in the same clause.

    "The scene is not safe": "safe" is negated. "No hazards, the scene is safe": the comma ends the
    negation's scope. "Not breathing and pulseless": "and" does."""
    before = text[:start]
    ends = list(_CLAUSE_END.finditer(before))
    clause = before[ends[-1].end() :] if ends else before
    words = re.findall(r"[\w'\u2019]+", clause.lower().replace("\u2019", "'"))[-NEGATION_WINDOW:]
    return any(w.endswith("n't") or w.replace("'", "") in NEGATORS for w in words)


@lru_cache(maxsize=4096)
def phrase_pattern(phrase: str) -> re.Pattern[str]:
    """A rule phrase's pattern: whole words, case-insensitive, each word with its inflections."""
    return keyword_pattern(phrase, inflect=True)


def asserted(phrase: str, text: str, negation: bool = True) -> bool:
    """Whether ``text`` says ``phrase`` (or an inflection of it) at least once without negating it
    (``negation=False``: at least once, negated or not)."""
    found = phrase_pattern(phrase).finditer(text)
    return any(not (negation and is_negated(text, m.start())) for m in found)


def denied(phrase: str, text: str) -> bool:
    """Whether ``text`` says ``phrase`` negated at least once ("not safe" denies "safe")."""
    return any(is_negated(text, m.start()) for m in phrase_pattern(phrase).finditer(text))


def rule_matches(spec: Mapping[str, Any], text: str) -> bool:
    """Whether ``text`` satisfies every condition of one answer's rule spec.

    Phrases match as whole words, case-insensitively, each word also in its common inflections
    (``rubrics.judges.rules.inflections``: "apply a tourniquet" matches "applied a tourniquet"). Unless the
    rule says ``negation_aware: false``, a phrase counts as *said* only where no negator (``NEGATORS``: not,
    no, never, without, n't words, ...) stands within ``NEGATION_WINDOW`` words before it in the same clause
    (``is_negated``): "the scene is not safe" does not say "scene is safe". A phrase that begins with a
    negator ("no pulse", "do not induce") is matched as written: only words before it can negate it.

    - ``any``: at least one phrase is said, or (when ``negated`` is given) one ``negated`` phrase is denied;
    - ``negated``: phrases whose denial asserts this answer ("not breathing normally" for "breathing
      normally"); alone, at least one must be denied;
    - ``all``: every phrase is said;
    - ``none``: no phrase is said (a denied one does not count);
    - ``regex``: the pattern is found anywhere (case-insensitive), exactly as written: negators never
      change what an author's pattern matches;
    - ``negation_aware``: ``false`` counts every phrase found, negated or not (and forbids ``negated``).
    """
    negation = negation_aware(spec)
    has_any, has_negated = "any" in spec, "negated" in spec
    if has_any or has_negated:
        said = has_any and any(asserted(p, text, negation) for p in spec["any"])
        if not said and not (has_negated and any(denied(p, text) for p in spec["negated"])):
            return False
    if "all" in spec and not all(asserted(p, text, negation) for p in spec["all"]):
        return False
    if "none" in spec and any(asserted(p, text, negation) for p in spec["none"]):
        return False
    return not ("regex" in spec and re.search(spec["regex"], text, re.IGNORECASE) is None)


def rule_verdict(rules: Mapping[Any, Mapping[str, Any]], text: str) -> Any:
    """The judged answer: the first answer value whose rule ``text`` satisfies, or None."""
    return next((value for value, spec in rules.items() if rule_matches(spec, text)), None)


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
class RuleJudge:
    """Judges with each requirement's keyword and pattern rules (offline, deterministic)."""

    name: Annotated[str, InFile(None)] = "rules"
    """The judge's name in the rubric (its key under ``judges``, not a field in the file)."""

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
        value = rule_verdict(requirement.rules, response_text(completion))
        if value is None:
            return JudgeResponse(answer=None, reasoning="no rule matched the response")
        return JudgeResponse(answer=value, reasoning=f"rule for {value!r} matched")

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
        """The file's fields, those at their default left out."""
        data: dict[str, Any] = {"type": "llm"}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name != "name" and (
                field.default is dataclasses.MISSING or value not in (field.default, None, "")
            ):
                data[field.name] = value
        return data


JUDGE_TYPES: dict[str, type[RuleJudge | LLMRequirementJudge]] = {
    "rules": RuleJudge,
    "llm": LLMRequirementJudge,
}
"""Judge classes by their YAML ``type``."""
