"""Which judge faults are retried, the name each is counted under, and a reply that is no verdict."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from rubrics.judges.faults import MalformedVerdictError, fault_cause, is_retryable, parse_verdict

REQUEST = httpx.Request("POST", "http://127.0.0.1:8000/v1/chat/completions")


def _status(code: int) -> openai.APIStatusError:
    return openai.APIStatusError(f"HTTP {code}", response=httpx.Response(code, request=REQUEST), body=None)


@pytest.mark.parametrize(
    ("code", "cause", "retried"),
    [
        (429, "rate_limit", True),
        (500, "server_error", True),
        (503, "server_error", True),
        (408, "http_408", True),  # request timeout: the server gave up, the next try may not
        (409, "http_409", True),
        (400, "http_400", False),  # the request itself is wrong: the same one fails again
        (401, "http_401", False),
        (404, "http_404", False),
    ],
)
def test_an_http_status_names_its_cause_and_whether_to_retry(code: int, cause: str, retried: bool) -> None:
    assert fault_cause(_status(code)) == cause and is_retryable(_status(code)) is retried


def test_timeouts_drops_and_malformed_verdicts_are_retried_anything_else_is_not() -> None:
    faults = [
        openai.APITimeoutError(request=REQUEST),
        TimeoutError(),
        openai.APIConnectionError(request=REQUEST),
        MalformedVerdictError("not JSON"),
        KeyError("choices"),
    ]
    assert [fault_cause(f) for f in faults] == ["timeout", "timeout", "connection", "malformed", "KeyError"]
    assert [is_retryable(f) for f in faults] == [True, True, True, True, False]


def test_a_reply_that_does_not_parse_is_malformed_and_says_when_it_was_cut() -> None:
    assert parse_verdict(json.loads, '{"score": 1}', "stop") == {"score": 1}
    with pytest.raises(MalformedVerdictError) as cut:
        parse_verdict(json.loads, '{"score": ', "length")
    assert str(cut.value).endswith("(the reply was cut at max_tokens)")
    with pytest.raises(MalformedVerdictError) as whole:
        parse_verdict(json.loads, "yes", "stop")
    assert "cut at max_tokens" not in str(whole.value)
