"""Warnings about rule-judge rules that load fine but cannot mean what they seem to.

``rubric validate`` prints them (``--strict`` refuses them); nothing here changes a verdict. Two checks,
per answer of a requirement with ``rules``:

- **The canonical phrase.** An answer's first phrase (``rule_phrases``) is the way a scripted policy says
  it, so it should satisfy that answer's rule and no other answer's: otherwise the answer cannot be said
  in its own words, or saying it is judged as another answer (the judge takes the first rule that matches).
- **A rule that can match nothing.** A phrase that must be said (``all``, or every ``any`` phrase when
  there is no ``negated``) contains a phrase that must not be (``none``): no reply satisfies both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rubrics.judges.matching import phrase_pattern, rule_matches
from rubrics.multistep.judging import rule_phrases
from rubrics.multistep.requirements import Requirement


@dataclass(frozen=True)
class RuleWarning:
    """One doubt about one answer's rule."""

    requirement: str
    """The requirement's name."""
    answer: Any
    """The answer value whose rule it is about (a key of ``requirement.rules``)."""
    message: str
    """What is wrong, in a sentence that follows the field path."""


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _first_phrase_warning(req: Requirement, value: Any, phrase: str) -> str | None:
    """Why ``phrase``, said alone, is not judged as ``value``; None when it is judged as ``value`` only."""
    satisfied = [v for v, spec in req.rules.items() if rule_matches(spec, phrase)]
    if value not in satisfied:
        return f"its first phrase {phrase!r} does not satisfy this answer's rule"
    if len(satisfied) > 1:
        answers = " and ".join(_fmt(v) for v in satisfied)
        return (
            f"its first phrase {phrase!r} satisfies the rules of answers {answers} "
            f"(the judge takes {_fmt(satisfied[0])})"
        )
    return None


def _says(outer: str, inner: str) -> bool:
    """Whether saying ``outer`` also says ``inner`` (as whole words, with inflections)."""
    return phrase_pattern(inner).search(outer) is not None


def _impossible(spec: Mapping[str, Any]) -> str | None:
    """Why no reply can satisfy ``spec``, or None when one may."""
    forbidden = spec.get("none", [])
    for phrase in spec.get("all", []):
        clash = next((f for f in forbidden if _says(phrase, f)), None)
        if clash is not None:
            return f"'all' phrase {phrase!r} says the 'none' phrase {clash!r}"
    wanted = spec.get("any", [])
    if wanted and "negated" not in spec:
        clashes = [next((f for f in forbidden if _says(p, f)), None) for p in wanted]
        if all(c is not None for c in clashes):
            return f"every 'any' phrase says a 'none' phrase ({clashes[0]!r} in {wanted[0]!r})"
    return None


def requirement_warnings(req: Requirement) -> list[RuleWarning]:
    """The warnings about one requirement's rules, in answer order."""
    found = []
    phrases = rule_phrases(req)
    for value, spec in req.rules.items():
        reason = _impossible(spec)
        if reason is not None:
            found.append(RuleWarning(req.name, value, f"this answer's rule can match nothing: {reason}"))
        elif phrases[value]:
            reason = _first_phrase_warning(req, value, phrases[value][0])
            if reason is not None:
                found.append(RuleWarning(req.name, value, reason))
    return found


def rule_warnings(requirements: list[Requirement]) -> list[RuleWarning]:
    """The warnings about every requirement's rules, in requirement order."""
    return [w for req in requirements for w in requirement_warnings(req)]
