"""Why a judge request failed, and whether another attempt is worth it: rate limits (429), server errors
(5xx), timeouts, dropped connections and malformed verdicts are retried; anything else ends the call."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import openai

from rubrics.judges.formats import JudgeFormatError

T = TypeVar("T")


class MalformedVerdictError(JudgeFormatError):
    """The endpoint answered, but its reply is not a valid verdict (retried like a server error)."""


def fault_cause(exc: BaseException) -> str:
    """A short name for why an attempt failed."""
    if isinstance(exc, MalformedVerdictError):
        return "malformed"
    if isinstance(exc, openai.APITimeoutError | TimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "connection"
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code == 429:
            return "rate_limit"
        return "server_error" if exc.status_code >= 500 else f"http_{exc.status_code}"
    return type(exc).__name__


def is_retryable(exc: BaseException) -> bool:
    """Rate limits, server errors, timeouts, connection drops and malformed verdicts are worth another try."""
    if isinstance(exc, MalformedVerdictError | TimeoutError | openai.APIConnectionError):
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in (408, 409, 429) or exc.status_code >= 500
    return False


def parse_verdict(parse: Callable[[str], T], text: str, finish_reason: str | None) -> T:
    """``parse(text)``; a reply that does not parse is a ``MalformedVerdictError``, retried like a server
    error (``finish_reason``: the server's, to say when the reply was cut at ``max_tokens``)."""
    try:
        return parse(text)
    except ValueError as exc:  # JudgeFormatError and pydantic's ValidationError are ValueErrors
        cut = " (the reply was cut at max_tokens)" if finish_reason == "length" else ""
        raise MalformedVerdictError(f"{exc}{cut}") from exc
