"""Criteria grading through the real HTTP judge: ``RuleFirstGrader`` over each LLM autograder on an
``LLMJudgeClient`` pointed at the local judge server (``tests/support/judge_server.py``); nothing is mocked
below HTTP. Request counts, scores (hand-derived), concurrency, retries, the verdict cache, failures, the
reference answer and the cost counters."""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from rubrics.criteria.autograders import PerCriterionGrader, PerCriterionOneShotGrader, RubricAsJudgeGrader
from rubrics.criteria.autograders.mixed import RuleFirstGrader
from rubrics.criteria.rubric import CriteriaRubric
from rubrics.judges import JudgeError, LLMJudgeClient
from rubrics.judges.stats import snapshot_delta
from rubrics.types import State
from tests.support.judge_server import JudgeServer, prompt_tokens, token_count

FAST: dict[str, Any] = {"backoff_initial_s": 0.01, "backoff_max_s": 0.02}

# Two rule criteria (judged offline) and three LLM criteria. The scripted judge says MET for an LLM
# criterion when its marker word is in the response. Positive weights: 5 + 3 + 2 = 10 in all; 3 + 2 = 5
# among the LLM criteria.
BURN = CriteriaRubric(
    [
        {
            "weight": 5.0,
            "requirement": "Tells the person to cool the burn under running water",
            "rule": {"any": ["running water"]},
        },
        {
            "weight": -4.0,
            "requirement": "Recommends putting butter or ice on the burn",
            "rule": {"any": ["butter", "ice"]},
        },
        {"weight": 3.0, "requirement": "Says when to see a doctor"},
        {"weight": 2.0, "requirement": "Keeps a calm, reassuring tone"},
        {"weight": -6.0, "requirement": "Gives a harmful home remedy"},
    ]
)
RULE_REQUIREMENTS = [c.requirement for c in BURN.criteria if c.rule is not None]
MARKERS = {
    "Says when to see a doctor": "doctor",
    "Keeps a calm, reassuring tone": "calm",
    "Gives a harmful home remedy": "toothpaste",
}
GOOD = "Stay calm, hold it under running water for 20 minutes, and see a doctor if it blisters."
BAD = "Put butter and toothpaste on it."
DOCTOR = "Cool it under running water and see a doctor; do not use ice."
VAGUE = "See a doctor."
RESPONSES = [GOOD, BAD, DOCTOR, VAGUE]
# verdicts (R0 +5 running water, R1 -4 butter/ice, L2 +3 doctor, L3 +2 calm, L4 -6 toothpaste):
#   GOOD    R0 L2 L3     raw 5 + 3 + 2 = 10   score 10 / 10 = 1.0
#   BAD     R1 L4        raw -4 - 6 = -10     score -1.0 clamped to 0.0
#   DOCTOR  R0 L2        raw 5 + 3 = 8        score 0.8 ("do not use ice": the negated phrase is not said)
#   VAGUE   L2           raw 3                score 0.3
PER_CRITERION_SCORES = [(1.0, 10.0), (0.0, -10.0), (0.8, 8.0), (0.3, 3.0)]


def response_of(user: str) -> str:
    found = re.search(r"<response>\n(.*?)\n</response>", user, re.DOTALL)
    assert found is not None
    return found.group(1)


def status(requirement: str, response: str) -> str:
    return "MET" if MARKERS[requirement] in response else "UNMET"


def scripted_judge(body: dict[str, Any]) -> str:
    """A judge that answers each grader's schema from the marker words (holistic: 80 with "doctor", else 20)."""
    user = body["messages"][1]["content"]
    response = response_of(user)
    requirements = re.findall(r"<criterion>\n(.*?)\n</criterion>", user, re.DOTALL)
    name = body["response_format"]["json_schema"]["name"]
    if name == "PerCriterionOutput":
        return json.dumps({"explanation": "scripted", "criterion_status": status(requirements[0], response)})
    if name == "OneShotOutput":
        evaluations = [
            {"criterion_idx": i, "explanation": "scripted", "criterion_status": status(r, response)}
            for i, r in enumerate(requirements)
        ]
        return json.dumps({"criteria_evaluations": evaluations})
    return json.dumps({"explanation": "scripted", "overall_score": 80 if "doctor" in response else 20})


@pytest.fixture
def server() -> Iterator[JudgeServer]:
    with JudgeServer(responder=scripted_judge) as s:
        yield s


@pytest.fixture
async def client(server: JudgeServer) -> AsyncIterator[LLMJudgeClient]:
    c = LLMJudgeClient(server.base_url, "judge", max_attempts=4, **FAST)
    yield c
    await c.close()


def users(server: JudgeServer) -> list[str]:
    return [body["messages"][1]["content"] for body in server.requests]


# -- what is sent, and the scores -------------------------------------------------------------------------


async def test_rule_criteria_are_never_sent_and_scores_combine(
    server: JudgeServer, client: LLMJudgeClient
) -> None:
    grader = RuleFirstGrader(PerCriterionGrader.from_client(client))
    reports = [await grader.grade(BURN.criteria, r, query="I burned my hand.") for r in RESPONSES]
    assert [(r.score, r.raw_score) for r in reports] == [pytest.approx(s) for s in PER_CRITERION_SCORES]
    assert len(server.requests) == 3 * 4  # 3 LLM criteria x 4 responses; the 2 rule criteria never
    assert not any(rule in user for user in users(server) for rule in RULE_REQUIREMENTS)
    assert [v.judged_by for v in reports[0].report or []] == ["rule", "rule", "llm", "llm", "llm"]
    assert [v.verdict for v in reports[2].report or []] == ["MET", "UNMET", "MET", "UNMET", "UNMET"]
    assert client.stats.requests == 12 and client.stats.retries == 0


async def test_one_shot_sends_one_request_per_response_with_only_the_llm_criteria(
    server: JudgeServer, client: LLMJudgeClient
) -> None:
    grader = RuleFirstGrader(PerCriterionOneShotGrader.from_client(client))
    reports = await asyncio.gather(*(grader.grade(BURN.criteria, r) for r in RESPONSES))
    assert [(r.score, r.raw_score) for r in reports] == [pytest.approx(s) for s in PER_CRITERION_SCORES]
    assert len(server.requests) == len(RESPONSES)
    for user in users(server):  # the LLM criteria, re-indexed 0..2
        assert user.count("<criterion_idx>") == 3 and "<criterion_idx>2</criterion_idx>" in user
        assert not any(rule in user for rule in RULE_REQUIREMENTS)


async def test_holistic_inner_grader_scores_with_the_mixed_formula(
    server: JudgeServer, client: LLMJudgeClient
) -> None:
    grader = RuleFirstGrader(RubricAsJudgeGrader.from_client(client))
    reports = [await grader.grade(BURN.criteria, r) for r in RESPONSES]
    # raw = llm / 100 * 5 (the LLM criteria's positive weights) + the MET rule weights; score = raw / 10
    expected = [
        (0.9, 9.0, 80.0),  # GOOD: 0.8 * 5 = 4, + 5 (running water) = 9
        (0.0, -3.0, 20.0),  # BAD: 0.2 * 5 = 1, - 4 (butter) = -3, clamped to 0
        (0.9, 9.0, 80.0),  # DOCTOR: 4 + 5 = 9
        (0.4, 4.0, 80.0),  # VAGUE: 4, no rule met
    ]
    assert [(r.score, r.raw_score, r.llm_raw_score) for r in reports] == [pytest.approx(e) for e in expected]
    assert [[c.requirement for c in r.report or []] for r in reports] == [RULE_REQUIREMENTS] * 4
    assert len(server.requests) == 4
    assert 'weight="-6"' in users(server)[0] and not any(r in users(server)[0] for r in RULE_REQUIREMENTS)


async def test_rules_alone_send_nothing(server: JudgeServer, client: LLMJudgeClient) -> None:
    rules_only = [c for c in BURN.criteria if c.rule is not None]
    report = await RuleFirstGrader(PerCriterionGrader.from_client(client)).grade(rules_only, BAD)
    assert report.raw_score == -4.0 and report.score == 0.0  # butter MET: -4 / 5, clamped
    assert server.requests == []


# -- concurrency -------------------------------------------------------------------------------------------


async def test_per_criterion_calls_run_in_parallel_within_max_concurrency(server: JudgeServer) -> None:
    server.delay_s = 0.1
    async with LLMJudgeClient(server.base_url, "judge", max_concurrency=8, **FAST) as wide:
        await RuleFirstGrader(PerCriterionGrader.from_client(wide)).grade(BURN.criteria, GOOD)
    assert server.max_in_flight == 3  # the three LLM criteria of one response at once

    server.max_in_flight = 0
    async with LLMJudgeClient(server.base_url, "judge", max_concurrency=4, **FAST) as narrow:
        grader = RuleFirstGrader(PerCriterionGrader.from_client(narrow))
        await asyncio.gather(*(grader.grade(BURN.criteria, r) for r in RESPONSES))
    assert len(server.requests) == 3 + 12 and server.max_in_flight == 4  # 12 wanted, 4 allowed


async def test_max_gradings_bounds_the_gradings_asking_the_judge_and_rules_alone_never_wait(
    server: JudgeServer,
) -> None:
    server.delay_s = 0.1
    rules_only = [c for c in BURN.criteria if c.rule is not None]
    async with LLMJudgeClient(server.base_url, "judge", max_concurrency=64, **FAST) as wide:
        grader = RuleFirstGrader(PerCriterionGrader.from_client(wide), max_gradings=2)
        start = asyncio.get_running_loop().time()
        judged = [asyncio.ensure_future(grader.grade(BURN.criteria, r)) for r in RESPONSES]
        await asyncio.sleep(0)  # two of them take both slots, two wait
        # graded before any judge answers (0.1 s): a grading without LLM criteria takes no slot
        offline = asyncio.gather(*(grader.grade(rules_only, r) for r in RESPONSES))
        assert len(await asyncio.wait_for(offline, 0.05)) == 4
        reports = await asyncio.gather(*judged)
        elapsed = asyncio.get_running_loop().time() - start
    assert server.max_in_flight == 6  # two gradings of 3 LLM criteria each, not all four gradings' 12
    assert elapsed >= 0.2  # two rounds of two gradings
    assert [(r.score, r.raw_score) for r in reports] == [pytest.approx(s) for s in PER_CRITERION_SCORES]
    with pytest.raises(ValueError, match="max_gradings"):
        RuleFirstGrader(None, max_gradings=0)


# -- faults ----------------------------------------------------------------------------------------------


async def test_429_500_and_malformed_replies_are_retried_into_the_right_scores(
    server: JudgeServer, client: LLMJudgeClient
) -> None:
    server.inject("429", "500", "malformed")  # the first three requests, whichever criteria they carry
    report = await RuleFirstGrader(PerCriterionGrader.from_client(client)).grade(BURN.criteria, GOOD)
    assert report.score == 1.0 and report.raw_score == 10.0
    assert len(server.requests) == 6 and server.fault_log[:3] == ["429", "500", "malformed"]
    stats = client.stats
    assert stats.retries == 3 and stats.failures == 0
    assert dict(stats.faults) == {"rate_limit": 1, "server_error": 1, "malformed": 1}


async def test_a_judge_failing_after_its_last_attempt_raises_and_marks_the_rollout(
    server: JudgeServer,
) -> None:
    # every request about BAD fails; the other rollouts are answered
    server.fault_for = lambda body: "500" if BAD in body["messages"][1]["content"] else None
    async with LLMJudgeClient(server.base_url, "judge", max_attempts=2, **FAST) as client:
        grader = RuleFirstGrader(PerCriterionGrader.from_client(client))
        states: list[State] = [{"prompt": "I burned my hand.", "completion": r} for r in (GOOD, BAD)]
        await BURN.as_rubric(grader).score_rewards(states)
        good, bad = states
        assert good["reward"] == 1.0 and not good.get("error")
        assert math.isnan(bad["reward"]) and "JudgeError" in (bad.get("error") or "")
        assert bad["metrics"]["errors/criteria"] == 1.0
        # GOOD: 3 requests; BAD: the failing criterion's 2 attempts at least, at most all 3 criteria's 2
        # (the first to run out of attempts cancels the others, whose verdicts would be thrown away; under
        # load a cancelled first attempt may not have reached the server yet)
        assert 3 + 2 <= len(server.requests) <= 3 + 6 and client.stats.failures >= 1
        with pytest.raises(JudgeError, match="no verdict after 2 attempt"):
            await grader.grade(BURN.criteria, BAD)


async def test_a_failed_criterion_cancels_the_others_requests(server: JudgeServer) -> None:
    server.delay_s = 0.3  # the answers that come; the tone criterion's 400 comes at once
    server.fault_for = lambda body: (
        "reject_schema" if "reassuring" in body["messages"][1]["content"] else None
    )
    async with LLMJudgeClient(server.base_url, "judge", structured_output="json_schema", **FAST) as client:
        grader = RuleFirstGrader(PerCriterionGrader.from_client(client))
        with pytest.raises(JudgeError, match="http_400"):
            await grader.grade(BURN.criteria, GOOD)
        await asyncio.sleep(0.5)  # long enough for the two other answers, had they still been awaited
        server.fault_for = None
        await grader.grade(BURN.criteria, GOOD)
    # cancelled, the two others left nothing in the cache: all three are asked again
    assert len(server.requests) == 3 + 3 and client.stats.cache_hits == 0


# -- the verdict cache -------------------------------------------------------------------------------------


@pytest.mark.parametrize("inner", [PerCriterionGrader, PerCriterionOneShotGrader, RubricAsJudgeGrader])
async def test_a_repeated_grading_is_served_from_the_cache(
    server: JudgeServer, client: LLMJudgeClient, inner: Any
) -> None:
    grader = RuleFirstGrader(inner.from_client(client))
    first = [await grader.grade(BURN.criteria, r, query="q", reference="ref") for r in RESPONSES]
    sent = len(server.requests)
    again = [await grader.grade(BURN.criteria, r, query="q", reference="ref") for r in RESPONSES]
    assert len(server.requests) == sent and client.stats.cache_hits == sent
    assert [r.score for r in again] == [r.score for r in first]
    await grader.grade(BURN.criteria, GOOD, query="q", reference="another reference")
    assert len(server.requests) > sent  # a different reference is a different request


async def test_identical_rollouts_of_a_group_cost_one_request_per_criterion(
    server: JudgeServer, client: LLMJudgeClient
) -> None:
    server.delay_s = 0.05  # all eight are in flight together
    grader = RuleFirstGrader(PerCriterionGrader.from_client(client))
    states: list[State] = [{"prompt": "I burned my hand.", "completion": GOOD} for _ in range(8)]
    await BURN.as_rubric(grader).score_rewards(states)
    assert [s["reward"] for s in states] == [1.0] * 8
    assert len(server.requests) == 3 and client.stats.cache_hits == 3 * 7


# -- the reference answer ----------------------------------------------------------------------------------


@pytest.mark.parametrize("inner", [PerCriterionGrader, PerCriterionOneShotGrader, RubricAsJudgeGrader])
async def test_the_reference_answer_is_in_the_request_only_when_given(
    server: JudgeServer, client: LLMJudgeClient, inner: Any
) -> None:
    grader = RuleFirstGrader(inner.from_client(client))
    reference = "Cool the burn under running water for 20 minutes."
    with_reference = await grader.grade(BURN.criteria, VAGUE, query="q", reference=reference)
    n = len(server.requests)
    await grader.grade(BURN.criteria, VAGUE, query="q")
    given, plain = users(server)[:n], users(server)[n:]
    assert given and all(f"<reference_answer>\n{reference}\n</reference_answer>" in u for u in given)
    assert plain and not any("reference_answer" in u or reference in u for u in plain)
    assert given[0].index("<query>") < given[0].index("<reference_answer>") < given[0].index("<response>")
    assert with_reference.report and with_reference.report[0].verdict == "UNMET"  # rules read the response


# -- cost counters -----------------------------------------------------------------------------------------


async def test_tokens_and_seconds_are_counted_and_snapshots_subtract(server: JudgeServer) -> None:
    server.delay_s = 0.02
    async with LLMJudgeClient(server.base_url, "judge", **FAST) as client:
        grader = RuleFirstGrader(PerCriterionGrader.from_client(client))
        await grader.grade(BURN.criteria, GOOD)
        before = client.stats.snapshot()
        await grader.grade(BURN.criteria, VAGUE, query="I burned my hand.")
        await grader.grade(BURN.criteria, VAGUE, query="I burned my hand.")  # served from the cache
        step = client.stats.since(before)
    bodies = server.requests[3:]  # the second grading's three requests
    seconds = step.pop("judge/seconds")
    assert step == {
        "judge/calls": 6.0,
        "judge/requests": 3.0,
        "judge/retries": 0.0,
        "judge/cache_hits": 3.0,
        "judge/fallbacks": 0.0,
        "judge/failures": 0.0,
        "judge/prompt_tokens": float(sum(prompt_tokens(b) for b in bodies)),
        "judge/completion_tokens": float(sum(token_count(scripted_judge(b)) for b in bodies)),
    }
    assert 3 * 0.02 <= seconds < 3.0  # each request waited out the server's delay
    total = client.stats.snapshot()
    assert total["judge/prompt_tokens"] == sum(prompt_tokens(b) for b in server.requests)
    assert snapshot_delta(before, total) == {**step, "judge/seconds": seconds}


async def test_a_server_without_usage_adds_no_tokens() -> None:
    with JudgeServer(responder=scripted_judge, usage=False) as server:
        async with LLMJudgeClient(server.base_url, "judge", **FAST) as client:
            await RuleFirstGrader(PerCriterionGrader.from_client(client)).grade(BURN.criteria, GOOD)
    stats = client.stats.snapshot()
    assert stats["judge/requests"] == 3.0 and stats["judge/seconds"] > 0.0
    assert stats["judge/prompt_tokens"] == 0.0 and stats["judge/completion_tokens"] == 0.0
