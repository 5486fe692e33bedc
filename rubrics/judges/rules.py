"""Rule judges for verifiable requirements: regular expressions, keyword sets and Python callables.

They answer in the binary format (1.0 or 0.0) and satisfy the same ``Judge`` protocol as LLM judges, so a
rubric mixes them freely. Keywords match whole words, case-insensitively: ``ems`` does not match "items"
(``docs/architecture.md``: rule judges).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from numbers import Real
from typing import Any, Literal

from rubrics.judges.base import response_text
from rubrics.judges.formats import JudgeResponse, JudgeResponseFormat, binary_judge_response_format
from rubrics.types import Messages


class RegexJudge:
    """1.0 when ``pattern`` is found in the response (``negate=True``: when it is absent)."""

    def __init__(
        self, pattern: str, name: str | None = None, flags: int = re.IGNORECASE, negate: bool = False
    ) -> None:
        self.pattern = re.compile(pattern, flags)
        """The compiled expression, searched anywhere in the response."""
        self.negate = negate
        """Reward the absence of a match instead of its presence."""
        self.name = name or f"regex:{pattern}"
        """Name used in metrics and error messages."""
        self.response_format: JudgeResponseFormat = binary_judge_response_format
        """Always binary."""

    async def __call__(
        self, prompt: Any, completion: Messages | str | None, answer: Any = None, state: Any = None
    ) -> JudgeResponse:
        """Search the response text."""
        match = self.pattern.search(response_text(completion))
        found = match is not None
        reason = f"found {match.group(0)!r}" if match else f"no match for /{self.pattern.pattern}/"
        return JudgeResponse(answer=1.0 if found != self.negate else 0.0, reasoning=reason)


KeywordMode = Literal["all", "any", "none"]


_UNINFLECTED = frozenset({
    "a", "an", "the", "and", "or", "but", "nor", "of", "to", "in", "on", "at", "by", "for", "with", "from",
    "as", "is", "are", "was", "were", "be", "been", "am", "it", "its", "his", "her", "their", "our", "my",
    "your", "this", "that", "these", "those", "no", "not", "never", "none", "all", "any", "some", "has", "had",
    "have", "do", "does", "did"
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


def keyword_pattern(keyword: str, inflect: bool = False) -> re.Pattern[str]:
    """Whole-word, case-insensitive pattern for a keyword or phrase (any whitespace between its words).

    ``inflect=True``: every word also matches its common inflections (``inflections``), so "apply a
    tourniquet" matches "applied tourniquets"."""
    words = keyword.split()
    if not words:
        raise ValueError("empty keyword")
    if inflect:
        parts = ["(?:" + "|".join(re.escape(f) for f in inflections(w)) + ")" for w in words]
    else:
        parts = [re.escape(w) for w in words]
    body = r"\s+".join(parts)
    return re.compile(rf"(?<!\w){body}(?!\w)", re.IGNORECASE)


class KeywordJudge:
    """1.0 when ``all``, ``any`` or ``none`` of the keywords appear as whole words in the response."""

    def __init__(self, keywords: Iterable[str], mode: KeywordMode = "all", name: str | None = None) -> None:
        self.keywords = [str(k) for k in keywords]
        """The keywords or phrases."""
        if not self.keywords:
            raise ValueError("KeywordJudge needs at least one keyword")
        if mode not in ("all", "any", "none"):
            raise ValueError(f"KeywordJudge mode must be 'all', 'any' or 'none', got {mode!r}")
        self.mode: KeywordMode = mode
        """How the keywords combine."""
        self._patterns = [keyword_pattern(k) for k in self.keywords]
        self.name = name or f"keywords_{mode}:{','.join(self.keywords)}"
        """Name used in metrics and error messages."""
        self.response_format: JudgeResponseFormat = binary_judge_response_format
        """Always binary."""

    async def __call__(
        self, prompt: Any, completion: Messages | str | None, answer: Any = None, state: Any = None
    ) -> JudgeResponse:
        """Look for each keyword as a whole word."""
        text = response_text(completion)
        found = [k for k, p in zip(self.keywords, self._patterns, strict=True) if p.search(text)]
        if self.mode == "all":
            ok = len(found) == len(self.keywords)
        elif self.mode == "any":
            ok = bool(found)
        else:
            ok = not found
        missing = [k for k in self.keywords if k not in found]
        return JudgeResponse(answer=1.0 if ok else 0.0, reasoning=f"found {found}; missing {missing}")


class CallableJudge:
    """Wraps ``fn``, sync or async, asking by name for any of ``prompt``, ``completion``, ``answer``, ``state``.

    ``fn`` returns a bool, a number, a ``(value, reasoning)`` pair or a ``JudgeResponse``; its answer is
    checked against ``response_format`` (binary by default).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        response_format: JudgeResponseFormat = binary_judge_response_format,
    ) -> None:
        self.fn = fn
        """The Python callable."""
        self.name: str = name or str(getattr(fn, "__name__", type(fn).__name__))
        """Name used in metrics and error messages."""
        self.response_format = response_format
        """Checks the callable's answer."""
        params = inspect.signature(fn).parameters
        takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        self._wanted = [n for n in ("prompt", "completion", "answer", "state") if takes_all or n in params]

    async def __call__(
        self, prompt: Any, completion: Messages | str | None, answer: Any = None, state: Any = None
    ) -> JudgeResponse:
        """Call ``fn`` and convert what it returns."""
        available = {"prompt": prompt, "completion": completion, "answer": answer, "state": state}
        result = self.fn(**{n: available[n] for n in self._wanted})
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, JudgeResponse):
            value, reasoning = result.answer, result.reasoning
        elif isinstance(result, tuple) and len(result) == 2:
            value, reasoning = result
        elif isinstance(result, bool | Real | list):
            value, reasoning = result, ""
        else:
            raise TypeError(f"judge {self.name!r} returned {type(result).__name__}: {result!r}")
        return JudgeResponse(answer=self.response_format.validate_answer(value), reasoning=str(reasoning))
