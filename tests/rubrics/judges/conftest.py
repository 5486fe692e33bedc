"""Fixtures of the judge tests: a fault-injecting judge server on 127.0.0.1 and the client on both HTTP paths."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from rubrics.judges import (
    LLMJudge,
    LLMJudgeClient,
    binary_judge_response_format,
)
from tests.support.judge_server import JudgeServer

FAST: dict[str, Any] = {"backoff_initial_s": 0.01, "backoff_max_s": 0.05}


@pytest.fixture
def server() -> Iterator[JudgeServer]:
    with JudgeServer(slow_s=1.5) as s:
        yield s


@pytest.fixture(params=[True, False], ids=["lean", "sdk"])
async def client(server: JudgeServer, request: pytest.FixtureRequest) -> AsyncIterator[LLMJudgeClient]:
    """The client on both HTTP paths: the lean one (the default for http://) and the openai SDK's."""
    c = LLMJudgeClient(
        server.base_url, "judge-model", timeout_s=0.5, max_attempts=4, lean_http=request.param, **FAST
    )
    yield c
    await c.close()


def judge_of(client: LLMJudgeClient, question: str = "Does the response check scene safety?") -> LLMJudge:
    return LLMJudge(client, question, binary_judge_response_format, name="safety")
