"""LLM judges against a real fault-injecting HTTP server on 127.0.0.1, rule judges, and JudgeRubric."""

from __future__ import annotations

import asyncio
import logging
import math
import random
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest

from rubrics import RubricGroup
from rubrics.judges import (
    CallableJudge,
    ContinuousJudgeResponseFormat,
    Judge,
    JudgeError,
    JudgeResponse,
    JudgeRubric,
    KeywordJudge,
    LLMJudge,
    LLMJudgeClient,
    RegexJudge,
    binary_judge_response_format,
)
from rubrics.judges.matching import asserted, rule_matches
from rubrics.judges.rules import RulesJudge
from rubrics.judges.transport import LeanChatPost, LeanHTTPTransport, httpx
from rubrics.multistep import BinaryRequirement, LLMRequirementJudge, RuleJudge
from tests.support.judge_server import DEFAULT_VERDICT, JudgeServer

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
    await judge_of(client)("p", "another response")
    assert "response_format" not in server.requests[-1]  # the downgrade is remembered


async def test_prompt_shows_question_response_and_ground_truth_with_reasoning(
    server: JudgeServer, client: LLMJudgeClient
) -> None:
    judge = LLMJudge(client, "Is the dose correct?", ContinuousJudgeResponseFormat(0, 1))
    server.responder = lambda body: '{"answer": 0.7, "reasoning": "mostly"}'
    prompt = [{"role": "user", "content": "The patient weighs 20 kg. What dose?"}]
    completion = [{"role": "assistant", "content": "Give 200 mg."}]
    answer = {"answer": 15.0, "reasoning": "15 mg/kg times 20 kg is 300 mg; 15 is the per-kg dose."}
    verdict = await judge(prompt, completion, answer, {})
    assert verdict.answer == 0.7
    body = server.requests[0]
    user = body["messages"][1]["content"]
    for text in (
        "The patient weighs 20 kg",
        "Give 200 mg.",
        "Is the dose correct?",
        "15.0",
        "15 mg/kg times 20",
    ):
        assert text in user
    assert "from 0 to 1 inclusive" in user
    assert body["max_tokens"] >= 1024 and body["model"] == "judge-model"


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


# -- rule judges ----------------------------------------------------------------------------------------


async def test_keyword_judge_matches_whole_words_case_insensitively() -> None:
    ems = KeywordJudge(["EMS"], mode="any")
    assert (await ems("p", "Call EMS now.")).answer == 1.0
    assert (await ems("p", "call ems now")).answer == 1.0
    assert (
        await ems("p", "Pack the items and systems.")
    ).answer == 0.0  # whole words only (docs/architecture.md: rule judges match whole words)
    phrase = KeywordJudge(["scene safety"], mode="all")
    assert (await phrase("p", [{"role": "assistant", "content": "Check Scene\nSafety first"}])).answer == 1.0


@pytest.mark.parametrize(
    ("mode", "text", "expected"),
    [
        ("all", "airway and breathing", 1.0),
        ("all", "airway only", 0.0),
        ("any", "breathing only", 1.0),
        ("any", "neither", 0.0),
        ("none", "neither", 1.0),
        ("none", "the airway", 0.0),
    ],
)
async def test_keyword_modes(mode: Any, text: str, expected: float) -> None:
    assert (await KeywordJudge(["airway", "breathing"], mode=mode)("p", text)).answer == expected


async def test_regex_judge_and_negation() -> None:
    assert (await RegexJudge(r"\b\d+\s*mg\b")("p", "Give 300 mg.")).answer == 1.0
    assert (await RegexJudge(r"\bguess\b", negate=True)("p", "I guess so")).answer == 0.0


async def test_callable_judge_sync_async_and_checked_answers() -> None:
    def exact(completion: str, answer: str) -> bool:
        return completion.strip() == answer

    async def partial(completion: str) -> tuple[float, str]:
        return 0.5, "half"

    assert (await CallableJudge(exact)("p", " 42 ", "42")).answer == 1.0
    continuous = CallableJudge(partial, response_format=ContinuousJudgeResponseFormat(0, 1))
    assert await continuous("p", "x") == JudgeResponse(0.5, "half")
    with pytest.raises(Exception, match="not one of the options"):
        await CallableJudge(partial)("p", "x")  # 0.5 is not binary


async def test_every_judge_satisfies_the_protocol(client: LLMJudgeClient) -> None:
    judges = [judge_of(client), RegexJudge("x"), KeywordJudge(["x"]), CallableJudge(lambda: True)]
    assert all(isinstance(j, Judge) for j in judges)


async def test_requirement_judges_give_the_same_judge_concept() -> None:
    """A rubric file's judges give a ``Judge`` per requirement: the protocol reward functions use."""
    rules = {1.0: {"regex": r"\b\d+\s*mg\b"}, 0.0: {"any": ["no dose"]}}
    req = BinaryRequirement(name="dose", question="Dose given?", rules=rules)
    llm = LLMRequirementJudge(name="llm", base_url="http://127.0.0.1:1/v1", model="judge")
    for judge in (RuleJudge().judge_for(req), llm.judge_for(req)):
        assert isinstance(judge, Judge) and judge.name == "dose"
        assert judge.response_format == req.response_format
    by_rules = RuleJudge().judge_for(req)
    assert isinstance(by_rules, RulesJudge)
    assert (await by_rules("p", "Give 300 mg.", {"answer": 1.0})).answer == 1.0
    assert (await by_rules("p", "There was no dose.")).answer == 0.0
    assert (await by_rules("p", "I wait.")).answer is None  # no rule matched: no answer, never correct


@pytest.mark.parametrize(
    "text", ["Give 300 mg.", "give 300MG now", "300 mgs", "Pack the items", "EMS", "items"]
)
async def test_reward_and_requirement_rules_match_alike(text: str) -> None:
    """One matcher: a regex judge and a requirement's regex rule, a keyword judge and a requirement's
    phrase rule (negation and inflections off) give the same verdict on the same reply."""
    regex, keyword = r"\b\d+\s*mg\b", "ems"
    rules = {1.0: {"regex": regex}}
    as_requirement = (await RulesJudge(rules, binary_judge_response_format)("p", text)).answer == 1.0
    assert as_requirement == ((await RegexJudge(regex)("p", text)).answer == 1.0)
    as_written = {"any": [keyword], "negation_aware": False}
    said = (await KeywordJudge([keyword], mode="any")("p", text)).answer == 1.0
    assert said == asserted(keyword, text, negation=False, inflect=False)
    assert said == rule_matches(as_written, text)  # "ems" inflects to ems/emses/emsed/emsing: never "items"


# -- JudgeRubric ----------------------------------------------------------------------------------------


async def test_judge_rubric_reward_funcs_call_the_judge(server: JudgeServer, client: LLMJudgeClient) -> None:
    async def safety(judge: Judge, prompt: Any, completion: Any, answer: Any, state: Any) -> float:
        verdict = await judge(prompt, completion, answer, state)
        return float(verdict.answer)

    rubric = JudgeRubric(judge=judge_of(client), funcs=[safety], weights=[2.0])
    rubric.add_judge_reward(KeywordJudge(["ems"]), weight=1.0, name="calls_ems")
    state: dict[str, Any] = {"prompt": "p", "completion": "scene is safe, calling EMS", "answer": "yes"}
    await rubric.score_rollout(state)  # type: ignore[arg-type]
    assert state["reward"] == 3.0  # 2.0 * 1.0 (LLM judge) + 1.0 * 1.0 (keyword judge)
    assert state["metrics"] == {"safety": 1.0, "calls_ems": 1.0}


async def test_judge_rubric_mixes_into_a_rubric_group(client: LLMJudgeClient) -> None:
    llm = JudgeRubric()
    llm.add_judge_reward(judge_of(client), name="llm_safety")
    rules = JudgeRubric()
    rules.add_judge_reward(RegexJudge(r"\bsafe\b"), weight=0.5, name="says_safe")
    state: dict[str, Any] = {"prompt": "p", "completion": "it is safe"}
    await RubricGroup([llm, rules]).score_rollout(state)  # type: ignore[arg-type]
    assert state["reward"] == 1.5 and set(state["metrics"]) == {"llm_safety", "says_safe"}


async def test_a_raising_rule_judge_marks_the_rollout() -> None:
    def broken(completion: str) -> bool:
        raise RuntimeError("checker crashed")

    rubric = JudgeRubric()
    rubric.add_judge_reward(CallableJudge(broken), name="broken")
    state: dict[str, Any] = {"prompt": "p", "completion": "c"}
    await rubric.score_rollout(state)  # type: ignore[arg-type]
    assert math.isnan(state["reward"]) and state["metrics"]["errors/broken"] == 1.0
    assert "checker crashed" in state["error"]


# -- the lean HTTP transport ----------------------------------------------------------------------------


async def raw_server(
    replies: list[bytes], close_after_each: bool = False
) -> tuple[asyncio.Server, list[int]]:
    """A bare asyncio HTTP server that sends ``replies`` in order; counts accepted connections."""
    accepted = [0]
    pending = list(replies)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted[0] += 1
        while pending:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
            await reader.readexactly(length)
            writer.write(pending.pop(0))
            await writer.drain()
            if close_after_each:
                break
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, accepted


async def test_lean_transport_reuses_connections_and_reads_every_body_kind() -> None:
    body = b'{"ok": true}'
    replies = [
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body),
        b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"ok"\r\n7\r\n: true}\r\n0\r\n\r\n',
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body),
        b"HTTP/1.1 500 Oops\r\nConnection: close\r\n\r\n" + body,  # no length: read to close
    ]
    server, accepted = await raw_server(replies)
    port = server.sockets[0].getsockname()[1]
    async with httpx.AsyncClient(transport=LeanHTTPTransport()) as http:
        responses = [await http.post(f"http://127.0.0.1:{port}/v1/x", json={"i": i}) for i in range(4)]
    server.close()
    assert [r.json() for r in responses] == [{"ok": True}] * 4
    assert [r.status_code for r in responses] == [200, 200, 200, 500]
    assert accepted[0] == 1  # one keep-alive connection carried all four


async def test_lean_transport_replaces_a_connection_the_server_closed() -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    server, accepted = await raw_server([ok, ok, ok], close_after_each=True)
    port = server.sockets[0].getsockname()[1]
    async with httpx.AsyncClient(transport=LeanHTTPTransport()) as http:
        for _ in range(3):
            assert (await http.get(f"http://127.0.0.1:{port}/")).json() == {}
    server.close()
    assert accepted[0] == 3


async def test_lean_transport_honours_the_read_timeout() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # reads until the client hangs up, never answers
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with httpx.AsyncClient(transport=LeanHTTPTransport(), timeout=0.2) as http:
        start = time.perf_counter()
        with pytest.raises(httpx.ReadTimeout):
            await http.get(f"http://127.0.0.1:{port}/")
    server.close()
    assert time.perf_counter() - start < 1.0


async def test_lean_transport_is_plain_http_only() -> None:
    async with httpx.AsyncClient(transport=LeanHTTPTransport()) as http:
        with pytest.raises(httpx.UnsupportedProtocol):
            await http.get("https://127.0.0.1:1/")
    assert LLMJudgeClient("https://example.invalid/v1", "m").lean_http is False
    assert LLMJudgeClient("http://127.0.0.1:1/v1", "m").lean_http is True


async def test_lean_chat_post_sends_json_and_raises_the_sdks_errors() -> None:
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        replies = [
            (b"200 OK", b'{"ok": true}'),
            (b"429 Too Many Requests", b'{"error": {"message": "slow down"}}'),
            (b"400 Bad Request", b"no json here"),
            (b"503 Busy", b"{}"),
            (b"200 OK", b"plain text"),
        ]
        for status, body in replies:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
            heads.append(head + await reader.readexactly(length))
            writer.write(b"HTTP/1.1 %s\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body))
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    post = LeanChatPost(f"http://127.0.0.1:{port}/v1/chat/completions", {"Authorization": "Bearer sk-x"})
    assert "sk-x" not in repr(post)
    assert await post({"model": "m", "n": 1}) == {"ok": True}
    with pytest.raises(openai.RateLimitError, match=r"^Error code: 429 - slow down$"):
        await post({})
    with pytest.raises(openai.BadRequestError, match=r"^Error code: 400$") as info:
        await post({})
    assert info.value.body == "no json here"
    with pytest.raises(openai.InternalServerError):
        await post({})
    assert await post({}) == "plain text"  # not JSON: the text, as the SDK gives it
    await post.aclose()
    server.close()
    first = heads[0].decode()
    assert first.startswith("POST /v1/chat/completions HTTP/1.1\r\n")
    for line in (f"Host: 127.0.0.1:{port}", "Authorization: Bearer sk-x", "Content-Type: application/json"):
        assert f"\r\n{line}\r\n" in first
    assert first.endswith('\r\n\r\n{"model": "m", "n": 1}')
    with pytest.raises(openai.APIConnectionError):
        await LeanChatPost("http://127.0.0.1:9/v1/chat/completions", {})({})
    with pytest.raises(ValueError, match="plain http"):
        LeanChatPost("https://example.invalid/v1/chat/completions", {})


async def test_unreachable_endpoint_is_a_counted_connection_fault() -> None:
    async with LLMJudgeClient("http://127.0.0.1:9/v1", "m", max_attempts=2, **FAST) as client:
        with pytest.raises(JudgeError, match="connection"):
            await judge_of(client)("p", "r")
    assert client.stats.faults["connection"] == 2
