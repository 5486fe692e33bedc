"""The one phrase and regex matcher of every rule: reward-function judges (``rubrics.judges.rules``),
requirement rules (``rubrics.multistep.judging``) and criteria rules (``rubrics.criteria``) all match here.

- A phrase matches as whole words, case-insensitively, with any whitespace between its words
  (``phrase_pattern``); requirement and criteria rules also accept each word's common inflections
  (``inflections``) and, unless a rule says ``negation_aware: false``, do not count a phrase a negator
  governs (``is_negated``). ``KeywordJudge`` matches its keywords as written, negated or not.
- A regular expression is searched anywhere in the text, case-insensitively unless a judge says otherwise,
  exactly as written (``regex_search``).
- A rule spec (``rule_matches``) combines both: ``any``/``all``/``none``/``negated`` phrases and a
  ``regex``; ``rule_verdict`` picks the first answer whose spec matches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

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


_UNINFLECTED = frozenset({
    "a", "an", "the", "and", "or", "but", "nor", "of", "to", "in", "on", "at", "by", "for", "with", "from",
    "as", "is", "are", "was", "were", "be", "been", "am", "it", "its", "his", "her", "their", "our", "my",
    "your", "this", "that", "these", "those", "no", "not", "never", "none", "all", "any", "some", "has",
    "had", "have", "do", "does", "did"
})  # fmt: skip
"""Function words that are matched only as written (``is`` never becomes ``iss``)."""


def _suffixed(stem: str) -> list[str]:
    """A base form and its regular inflections."""
    if stem.endswith("e"):
        return [stem, stem + "s", stem + "d", stem[:-1] + "ing"]
    if stem.endswith("y") and stem[-2] not in "aeiou":
        return [stem, stem[:-1] + "ies", stem[:-1] + "ied", stem + "ing"]
    if stem.endswith(("s", "x", "z", "ch", "sh")):
        return [stem, stem + "es", stem + "ed", stem + "ing"]
    forms = [stem, stem + "s", stem + "ed", stem + "ing"]
    if len(stem) <= 4 and re.search(r"[^aeiou][aeiou][bdgklmnprt]$", stem):
        forms += [stem + stem[-1] + "ed", stem + stem[-1] + "ing"]
    return forms


def _bases(stem: str) -> list[str]:
    """The word itself and the base forms it may be an inflection of (over-generated on purpose)."""
    bases = [stem]
    if stem.endswith(("ies", "ied")):
        bases.append(stem[:-3] + "y")
    elif stem.endswith("s") and not stem.endswith(("ss", "us", "is")):
        bases.append(stem[:-1])
    elif stem.endswith("ed") and not stem.endswith("eed"):
        bases += [stem[:-2], stem[:-1]]
    elif stem.endswith("ing") and len(stem) > 5:
        bases += [stem[:-3], stem[:-3] + "e"]
    if len(bases) > 1 and len(bases[1]) > 3 and bases[1][-1] == bases[1][-2] not in "aeiouls":
        bases.append(bases[1][:-1])  # stopped -> stop
    return [b for b in bases if len(b) >= 3]


def inflections(word: str) -> list[str]:
    """``word`` and its common English inflections, by a small suffix rule (no stemming dependency).

    A word ending in at least 3 letters (not a function word) is reduced to the base forms it may inflect
    (``applied`` -> apply, ``responds`` -> respond, ``staging`` -> stage, ``stopped`` -> stop), and every
    base gets ``-s``/``-es``, ``-ed``/``-d`` and ``-ing``, with a final ``e`` dropped before ``-ing``, a
    consonant ``y`` turned into ``ie``/``i`` (applies, applied) and the final consonant of a short word
    doubled (stopped). So "apply", "applies", "applied" and "applying" all match one another, and
    "tourniquet" matches "tourniquets". Over-generated forms (``tourniqueted``, ``breath``) are harmless
    in practice: a reply that contains them says the word."""
    m = re.search(r"[a-z]+$", word.lower())
    if m is None or len(m.group(0)) < 3 or word.lower() in _UNINFLECTED:
        return [word]
    head = word[: m.start()]
    bases = _bases(m.group(0))
    forms = [f for base in (bases[1:] or bases) for f in _suffixed(base)]
    return [word] + [head + f for f in dict.fromkeys(forms) if head + f != word.lower()]


@lru_cache(maxsize=4096)
def phrase_pattern(phrase: str, inflect: bool = True) -> re.Pattern[str]:
    """Whole-word, case-insensitive pattern for a phrase (any whitespace between its words).

    ``inflect=True``: every word also matches its common inflections (``inflections``), so "apply a
    tourniquet" matches "applied tourniquets"."""
    words = phrase.split()
    if not words:
        raise ValueError("empty keyword")
    if inflect:
        parts = ["(?:" + "|".join(re.escape(f) for f in inflections(w)) + ")" for w in words]
    else:
        parts = [re.escape(w) for w in words]
    body = r"\s+".join(parts)
    return re.compile(rf"(?<!\w){body}(?!\w)", re.IGNORECASE)


@lru_cache(maxsize=1024)
def _regex(pattern: str, flags: int) -> re.Pattern[str]:
    return re.compile(pattern, flags)


def regex_search(pattern: str, text: str, flags: int = re.IGNORECASE) -> re.Match[str] | None:
    """The first match of ``pattern`` anywhere in ``text`` (case-insensitive by default), or None."""
    return _regex(pattern, flags).search(text)


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
    """Whether a rule's phrases count only where no negator governs them (``negation_aware``, default
    true)."""
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


def asserted(phrase: str, text: str, negation: bool = True, inflect: bool = True) -> bool:
    """Whether ``text`` says ``phrase`` (or, with ``inflect``, an inflection of it) at least once without
    negating it (``negation=False``: at least once, negated or not)."""
    found = phrase_pattern(phrase, inflect).finditer(text)
    return any(not (negation and is_negated(text, m.start())) for m in found)


def denied(phrase: str, text: str) -> bool:
    """Whether ``text`` says ``phrase`` negated at least once ("not safe" denies "safe")."""
    return any(is_negated(text, m.start()) for m in phrase_pattern(phrase).finditer(text))


def rule_matches(spec: Mapping[str, Any], text: str) -> bool:
    """Whether ``text`` satisfies every condition of one answer's rule spec.

    Phrases match as whole words, case-insensitively, each word also in its common inflections
    (``inflections``: "apply a tourniquet" matches "applied a tourniquet"). Unless the
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
    return not ("regex" in spec and regex_search(spec["regex"], text) is None)


def rule_verdict(rules: Mapping[Any, Mapping[str, Any]], text: str) -> Any:
    """The judged answer: the first answer value whose rule ``text`` satisfies, or None."""
    return next((value for value, spec in rules.items() if rule_matches(spec, text)), None)
