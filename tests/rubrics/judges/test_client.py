"""The LLM judge client against a real fault-injecting HTTP server on 127.0.0.1: faults retried into verdicts
or counted, structured output's fallback, the cache, one shared concurrency bound, the API key."""

from __future__ import annotations

import asyncio
import logging
import math
import random
import threading
import time
from typing import Any

import pytest

from rubrics.judges import (
    JudgeError,
    JudgeResponse,
    JudgeRubric,
    LLMJudgeClient,
)
from rubrics.judges.formats import REASON_MAX_CHARS
from tests.support.judge_server import DEFAULT_VERDICT, JudgeProcess, JudgeServer

from .conftest import FAST, judge_of

# -- faults ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "cause"),
    [
        ("429", "rate_limit"),
        ("500", "server_error"),
        ("503", "server_error"),
        ("slow", "timeout"),
        ("malformed", "malformed"),
        ("truncated", "malformed"),
        ("wrong_value", "malformed"),
    ],
)
async def test_each_fault_is_retried_into_a_verdict(
    server: JudgeServer, client: LLMJudgeClient, fault: str, cause: str
) -> None:
    server.inject(fault)
    start = time.perf_counter()
    verdict = await judge_of(client)("prompt", "I check the scene is safe.", None)
    assert verdict.answer == 1.0
    assert len(server.requests) == 2 and server.fault_log == [fault, None]
    assert client.stats.retries == 1 and client.stats.faults[cause] == 1 and client.stats.failures == 0
    if fault == "slow":  # the timeout cut the slow answer short: it did not wait the full 1.5 s
        assert time.perf_counter() - start < 1.4


async def test_json_in_a_code_fence_needs_no_retry(server: JudgeServer, client: LLMJudgeClient) -> None:
    server.inject("fenced")
    verdict = await judge_of(client)("prompt", "response")
    assert verdict == JudgeResponse(1.0, "The response satisfies the requirement.")
    assert len(server.requests) == 1 and client.stats.retries == 0


async def test_persistent_fault_raises_after_the_last_retry(
    server: JudgeServer, client: LLMJudgeClient
) -> None:
    server.inject(*["500"] * 4)
    with pytest.raises(JudgeError, match=r"no verdict after 4 attempt\(s\): server_error"):
        await judge_of(client)("prompt", "response")
    assert len(server.requests) == 4
    assert client.stats.failures == 1 and client.stats.retries == 3


async def test_a_judge_that_never_answers_in_time_says_how_long_it_was_given(server: JudgeServer) -> None:
    server.inject("slow", "slow")
    async with LLMJudgeClient(server.base_url, "m", timeout_s=0.25, max_attempts=2, **FAST) as client:
        with pytest.raises(JudgeError) as failed:
            await judge_of(client)("prompt", "response")
    assert str(failed.value) == (
        f"judge 'm' at {server.base_url}: no verdict after 2 attempt(s): timeout: "
        "no answer within timeout_s = 0.25 s"
    )
    assert client.stats.faults["timeout"] == 2 and client.stats.retries == 1


async def test_a_failed_judge_marks_the_rollout_never_a_silent_zero(
    server: JudgeServer, client: LLMJudgeClient
) -> None:
    def responder(body: dict[str, Any]) -> str:  # rollout "a" always gets prose, never JSON
        return (
            "no idea" if "<response>\na\n</response>" in body["messages"][1]["content"] else DEFAULT_VERDICT
        )

    server.responder = responder
    rubric = JudgeRubric()
    rubric.add_judge_reward(judge_of(client), weight=1.0, name="safety")
    states: list[dict[str, Any]] = [{"prompt": "p", "completion": "a"}, {"prompt": "p", "completion": "b"}]
    await rubric.score_group(states)  # type: ignore[arg-type]
    bad, good = states
    assert math.isnan(bad["reward"]) and bad["metrics"]["errors/safety"] == 1.0
    assert "safety" in bad["error"] and "malformed" in bad["error"]
    assert bad["advantage"] == 0.0
    assert good["reward"] == 1.0 and not good.get("error")
    assert len(server.requests) == 5 and client.stats.failures == 1  # 4 attempts for "a", 1 for "b"


async def test_random_faults_over_many_rollouts_lose_none(server: JudgeServer) -> None:
    rng = random.Random(0)
    faults = ["429", "500", "slow", "malformed", "truncated", "fenced", "wrong_value"]
    server.inject(*(rng.choice([*faults, "ok", "ok", "ok"]) for _ in range(300)))
    async with LLMJudgeClient(
        server.base_url, "judge-model", timeout_s=0.3, max_attempts=3, max_concurrency=8, cache=False, **FAST
    ) as client:
        rubric = JudgeRubric()
        rubric.add_judge_reward(judge_of(client), name="safety")
        states: list[dict[str, Any]] = [{"prompt": "p", "completion": f"response {i}"} for i in range(60)]
        await rubric.score_group(states)  # type: ignore[arg-type]

    scored = [s for s in states if s["reward"] == 1.0 and not s.get("error")]
    errored = [s for s in states if s.get("error")]
    assert len(scored) + len(errored) == 60  # every rollout is either scored or marked
    assert all(math.isnan(s["reward"]) and s["metrics"]["errors/safety"] == 1.0 for s in errored)
    assert len(errored) == client.stats.failures
    assert len(scored) > 40  # three attempts recover most rollouts
    # every fault the server injected was seen by the client (a fenced reply is not a fault)
    injected = [f for f in server.fault_log if f not in (None, "ok", "fenced")]
    assert sum(client.stats.faults.values()) == len(injected)
    assert len(server.requests) == client.stats.requests


def test_backoff_is_full_jitter_under_a_doubling_cap() -> None:
    c = LLMJudgeClient("http://127.0.0.1:1/v1", "m", backoff_initial_s=0.5, backoff_max_s=3.0)
    # caps: attempt 1 -> 0.5, 2 -> 1.0, 3 -> 2.0, 4 and later -> 3.0 (backoff_max_s)
    for attempt, cap in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 3.0), (5000, 3.0)]:
        waits = [c.backoff_wait_s(attempt) for _ in range(200)]
        assert all(0.0 <= w <= cap for w in waits) and max(waits) > cap / 2


async def test_non_retryable_errors_are_not_retried(server: JudgeServer) -> None:
    server.inject("reject_schema")
    async with LLMJudgeClient(server.base_url, "m", structured_output="json_schema", **FAST) as client:
        with pytest.raises(JudgeError, match="http_400"):
            await judge_of(client)("p", "r")
    assert len(server.requests) == 1


# -- protocol details -----------------------------------------------------------------------------------


async def test_structured_output_falls_back_when_rejected(
    server: JudgeServer, client: LLMJudgeClient
) -> None:
    server.inject("reject_schema", "reject_schema")
    assert (await judge_of(client)("p", "r")).answer == 1.0
    kinds = [r.get("response_format", {}).get("type") for r in server.requests]
    assert kinds == ["json_schema", "json_object", None]
    schema = server.requests[0]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["answer"]["enum"] == [1.0, 0.0]
    assert schema["properties"]["reasoning"]["maxLength"] == REASON_MAX_CHARS
    assert client.stats.fallbacks == 2  # each refused request counted
    await judge_of(client)("p", "another response")
    assert "response_format" not in server.requests[-1]  # the downgrade is remembered


async def test_identical_requests_are_cached(server: JudgeServer, client: LLMJudgeClient) -> None:
    judge = judge_of(client)
    await asyncio.gather(judge("p", "same"), judge("p", "different"))
    await judge("p", "same")
    assert len(server.requests) == 2 and client.stats.cache_hits == 1


async def test_concurrency_is_bounded_by_one_shared_semaphore(server: JudgeServer) -> None:
    lock, live, peak = threading.Lock(), [0], [0]

    def responder(body: dict[str, Any]) -> str:
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        time.sleep(0.05)
        with lock:
            live[0] -= 1
        return '{"answer": 1.0, "reasoning": "ok"}'

    server.responder = responder
    async with LLMJudgeClient(server.base_url, "m", max_concurrency=3, **FAST) as client:
        a, b = judge_of(client, "question A"), judge_of(client, "question B")  # two judges, one client
        await asyncio.gather(*(j("p", f"r{i}") for i in range(8) for j in (a, b)))
    assert len(server.requests) == 16 and peak[0] == 3


async def test_api_key_comes_from_the_named_variable_and_is_never_shown(
    server: JudgeServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-test-very-secret-value"
    monkeypatch.setenv("JUDGE_TEST_KEY", secret)
    caplog.set_level(logging.DEBUG)
    async with LLMJudgeClient(
        server.base_url, "m", api_key_env="JUDGE_TEST_KEY", max_attempts=3, **FAST
    ) as c:
        assert secret not in repr(c) and "JUDGE_TEST_KEY" in repr(c)
        server.inject("429")
        await judge_of(c)("p", "r")
        server.inject("500", "500", "500")
        with pytest.raises(JudgeError) as info:
            await judge_of(c)("p", "other")
    assert server.authorizations[0] == f"Bearer {secret}"  # the key itself goes only to the server
    assert secret not in str(info.value) and secret not in caplog.text
    monkeypatch.delenv("JUDGE_TEST_KEY")
    with pytest.raises(ValueError, match="'JUDGE_TEST_KEY' is not set"):
        LLMJudgeClient(server.base_url, "m", api_key_env="JUDGE_TEST_KEY")


async def test_unreachable_endpoint_is_a_counted_connection_fault() -> None:
    async with LLMJudgeClient("http://127.0.0.1:9/v1", "m", max_attempts=2, **FAST) as client:
        with pytest.raises(JudgeError, match="connection"):
            await judge_of(client)("p", "r")
    assert client.stats.faults["connection"] == 2


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "sdk"])
async def test_a_judge_killed_mid_request_fails_those_verdicts_and_serves_again_once_back(lean: bool) -> None:
    with JudgeProcess(delay_s=0.05) as judge:
        async with LLMJudgeClient(judge.base_url, "m", max_attempts=2, lean_http=lean, **FAST) as client:
            assert (await judge_of(client)("p", "warm")).answer == 1.0  # a kept-alive connection to it
            judge.exit_after(1)  # one more answer, then the process exits with the others in flight
            results = await asyncio.gather(
                *(judge_of(client)("p", f"reply {i}") for i in range(4)), return_exceptions=True
            )
            failed = [r for r in results if isinstance(r, JudgeError)]
            assert len(failed) == 3 and sum(isinstance(r, JudgeResponse) for r in results) == 1
            assert all(
                f"judge 'm' at {judge.base_url}: no verdict after 2 attempt(s)" in str(r) for r in failed
            )
            assert judge.process is not None and judge.process.wait(timeout=10) == 0  # it really exited
            judge.restart()  # the same port; the same client, no new connection asked for
            again = await asyncio.gather(*(judge_of(client)("p", f"again {i}") for i in range(4)))
    assert [r.answer for r in again] == [1.0] * 4
    assert client.stats.failures == 3 and client.stats.faults["connection"] >= 3
