"""``JudgeEndpoint``: one settings type for every LLM judge, the client made from it, and the one way
judges and graders ask for a structured verdict."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import ValidationError

from rubrics.judges import LOCAL_JUDGE, JudgeEndpoint, LLMJudgeClient, StructuredReply
from rubrics.multistep import LLMRequirementJudge


def test_defaults_and_constraints() -> None:
    assert JudgeEndpoint.defaults() == {
        "api_key_env": None,
        "max_concurrency": 32,
        "timeout_s": 60.0,
        "max_attempts": 5,
    }
    for bad in ({"max_concurrency": 0}, {"max_attempts": True}, {"timeout_s": float("inf")}, {"model": ""}):
        with pytest.raises(ValidationError):
            LOCAL_JUDGE.replaced(**bad)
    with pytest.raises(ValidationError):  # frozen: one endpoint, shared, never edited in place
        LOCAL_JUDGE.model = "other"  # type: ignore[misc]


def test_the_client_takes_every_setting_of_its_endpoint() -> None:
    endpoint = JudgeEndpoint(
        base_url="http://127.0.0.1:9/v1", model="m", max_concurrency=3, timeout_s=7.5, max_attempts=2
    )
    client = LLMJudgeClient.from_endpoint(endpoint, max_tokens=64)
    got = (client.base_url, client.model, client.api_key_env, client.timeout_s, client.max_attempts)
    assert got == ("http://127.0.0.1:9/v1", "m", None, 7.5, 2)
    assert client.max_tokens == 64
    # the client's own defaults are the endpoint's
    plain = LLMJudgeClient("http://127.0.0.1:9/v1", "m")
    assert (plain.timeout_s, plain.max_attempts) == (60.0, 5)


def test_a_multistep_llm_judge_holds_its_endpoint_and_is_pointed_elsewhere_whole() -> None:
    judge = LLMRequirementJudge("llm", LOCAL_JUDGE.replaced(timeout_s=12.5))
    before = judge.client
    judge.retarget(base_url="http://judge-host:9000/v1")  # what envs.build does with env.judge_base_url
    assert judge.endpoint == LOCAL_JUDGE.replaced(base_url="http://judge-host:9000/v1", timeout_s=12.5)
    assert judge.client is not before and judge.client.base_url == "http://judge-host:9000/v1"
    assert judge.to_dict() == {
        "type": "llm",
        "base_url": "http://judge-host:9000/v1",
        "model": "judge",
        "timeout_s": 12.5,
    }


def test_ask_sends_a_system_and_a_user_message_with_the_reply_schema() -> None:
    client = LLMJudgeClient("http://127.0.0.1:9/v1", "m")
    sent: dict[str, Any] = {}

    async def complete(messages: Any, parse: Any, schema: Any = None, schema_name: str = "verdict") -> Any:
        sent.update(messages=messages, schema=schema, schema_name=schema_name)
        return parse('{"ok": true}')

    client.complete = complete  # type: ignore[method-assign]
    reply = StructuredReply(lambda text: text.upper(), {"type": "object"}, "Shape")
    assert asyncio.run(client.ask("sys", "user", reply)) == '{"OK": TRUE}'
    assert sent == {
        "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "user"}],
        "schema": {"type": "object"},
        "schema_name": "Shape",
    }
