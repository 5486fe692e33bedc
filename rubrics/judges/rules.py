"""Rule judges for verifiable requirements: regular expressions, keyword sets and Python callables.

They answer in the binary format (1.0 or 0.0) and satisfy the same ``Judge`` protocol as LLM judges, so a
rubric mixes them freely. They match with the one matcher every rule uses (``rubrics.judges.matching``):
keywords match whole words, case-insensitively, as written (``ems`` does not match "items"; no inflections,
no negation heuristic), patterns are searched anywhere (``docs/architecture.md``: rule judges).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from numbers import Real
from typing import Any, Literal

from rubrics.judges.base import response_text
from rubrics.judges.formats import JudgeResponse, JudgeResponseFormat, binary_judge_response_format
from rubrics.judges.matching import asserted, phrase_pattern, regex_search, rule_verdict
from rubrics.types import Messages


class RegexJudge:
    """1.0 when ``pattern`` is found in the response (``negate=True``: when it is absent)."""

    def __init__(
        self, pattern: str, name: str | None = None, flags: int = re.IGNORECASE, negate: bool = False
    ) -> None:
        self.pattern = pattern
        """The expression, searched anywhere in the response."""
        self.flags = flags
        """``re`` flags of the search (case-insensitive by default)."""
        re.compile(pattern, flags)  # a bad pattern fails here, not at the first rollout
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
        match = regex_search(self.pattern, response_text(completion), self.flags)
        found = match is not None
        reason = f"found {match.group(0)!r}" if match else f"no match for /{self.pattern}/"
        return JudgeResponse(answer=1.0 if found != self.negate else 0.0, reasoning=reason)


KeywordMode = Literal["all", "any", "none"]


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
        for keyword in self.keywords:
            phrase_pattern(keyword, inflect=False)  # an empty keyword fails here, not at the first rollout
        self.name = name or f"keywords_{mode}:{','.join(self.keywords)}"
        """Name used in metrics and error messages."""
        self.response_format: JudgeResponseFormat = binary_judge_response_format
        """Always binary."""

    async def __call__(
        self, prompt: Any, completion: Messages | str | None, answer: Any = None, state: Any = None
    ) -> JudgeResponse:
        """Look for each keyword as a whole word."""
        text = response_text(completion)
        found = [k for k in self.keywords if asserted(k, text, negation=False, inflect=False)]
        if self.mode == "all":
            ok = len(found) == len(self.keywords)
        elif self.mode == "any":
            ok = bool(found)
        else:
            ok = not found
        missing = [k for k in self.keywords if k not in found]
        return JudgeResponse(answer=1.0 if ok else 0.0, reasoning=f"found {found}; missing {missing}")


class RulesJudge:
    """The first answer whose rule spec the response satisfies (``rubrics.judges.matching.rule_verdict``), or
    no answer (``None``) when none does: how a requirement's rules are judged
    (``RuleRequirementJudge.judge_for`` in ``rubrics.multistep.judging``)."""

    def __init__(
        self,
        rules: Mapping[Any, Mapping[str, Any]],
        response_format: JudgeResponseFormat,
        name: str = "rules",
    ) -> None:
        self.rules = rules
        """One match spec per answer value, in the order they are tried."""
        self.response_format = response_format
        """The format of the answers (the requirement's)."""
        self.name = name
        """Name used in metrics and error messages."""

    async def __call__(
        self, prompt: Any, completion: Messages | str | None, answer: Any = None, state: Any = None
    ) -> JudgeResponse:
        """Try each answer's rule on the response text."""
        value = rule_verdict(self.rules, response_text(completion))
        if value is None:
            return JudgeResponse(answer=None, reasoning="no rule matched the response")
        return JudgeResponse(answer=value, reasoning=f"rule for {value!r} matched")


class CallableJudge:
    """Wraps ``fn``, sync or async, asking by name for any of ``prompt``, ``completion``, ``answer``,
    ``state``.

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
