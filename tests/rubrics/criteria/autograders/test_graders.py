"""The graders: per criterion (concurrent, async, dicts or JSON), one shot (indices in any order, incomplete
answers refused), bad output refused, and the built-in generate function on the LLM judge client against
the local judge server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from rubrics.criteria.autograders import (
    CriterionEvaluation,
    GraderOutputError,
    OneShotOutput,
    PerCriterionGrader,
    PerCriterionOneShotGrader,
    PerCriterionOutput,
    RubricAsJudgeGrader,
)
from rubrics.judges import JudgeError, LLMJudgeClient
from tests.support.judge_server import JudgeServer

from .helpers import EXAMPLE_CRITERIA, verdicts_by_requirement

# -- graders ----------------------------------------------------------------------------------------------


async def test_the_example_criteria_per_criterion() -> None:
    met = {
        "States Q4 2023 base margin as 17.2%": True,
        "Explicitly uses Shapley attribution for decomposition": False,
        "Uses total deliveries instead of cash-only deliveries": False,
    }
    grader = PerCriterionGrader(generate_fn=verdicts_by_requirement(met))
    result = await EXAMPLE_CRITERIA.grade(
        query="Input query...", to_grade="Output to evaluate...", autograder=grader
    )
    assert f"Score: {result.score:.2f}" == "Score: 0.56"  # 10 / 18
    assert result.raw_score == 10.0 and result.llm_raw_score == 10.0
    assert result.report is not None
    assert [(c.verdict, c.requirement) for c in result.report] == [
        ("MET", "States Q4 2023 base margin as 17.2%"),
        ("UNMET", "Explicitly uses Shapley attribution for decomposition"),
        ("UNMET", "Uses total deliveries instead of cash-only deliveries"),
    ]
    assert result.report[0].reason == "judged MET" and result.report[2].weight == -15.0


async def test_per_criterion_calls_run_concurrently_and_accept_async_dicts_and_json() -> None:
    live, peak = [0], [0]
    replies = iter(
        [
            {"explanation": "a", "criterion_status": "MET"},
            '```json\n{"explanation": "b", "criterion_status": "unmet"}\n```',
            PerCriterionOutput(explanation="c", criterion_status="MET"),
        ]
    )

    async def generate(system_prompt: str, user_prompt: str) -> Any:
        live[0] += 1
        peak[0] = max(peak[0], live[0])
        await asyncio.sleep(0.01)
        live[0] -= 1
        return next(replies)

    result = await EXAMPLE_CRITERIA.grade("t", autograder=PerCriterionGrader(generate))
    assert peak[0] == 3
    assert [c.verdict for c in result.report or []] == ["MET", "UNMET", "MET"]
    assert result.raw_score == -5.0 and result.score == 0.0  # (10 - 15) / 18 < 0, clamped


async def test_one_shot_maps_zero_based_indices_in_any_order() -> None:
    def generate(system_prompt: str, user_prompt: str) -> OneShotOutput:
        assert "<criterion_idx>2</criterion_idx>" in user_prompt
        return OneShotOutput(
            criteria_evaluations=[
                CriterionEvaluation(criterion_idx=2, explanation="error made", criterion_status="MET"),
                CriterionEvaluation(criterion_idx=0, explanation="yes", criterion_status="MET"),
                CriterionEvaluation(criterion_idx=1, explanation="no", criterion_status="UNMET"),
            ]
        )

    result = await EXAMPLE_CRITERIA.grade("t", autograder=PerCriterionOneShotGrader(generate))
    assert [(c.verdict, c.reason) for c in result.report or []] == [
        ("MET", "yes"),
        ("UNMET", "no"),
        ("MET", "error made"),
    ]
    assert result.raw_score == -5.0  # 10 - 15


@pytest.mark.parametrize(
    ("indices", "message"),
    [
        ([0, 1], r"no evaluation for criterion_idx \[2\]"),
        ([0, 1, 3], "out of range"),
        ([0, 1, 1, 2], "twice"),
    ],
)
async def test_one_shot_rejects_incomplete_answers(indices: list[int], message: str) -> None:
    output = {"criteria_evaluations": [{"criterion_idx": i, "criterion_status": "MET"} for i in indices]}
    with pytest.raises(GraderOutputError, match=message):
        await EXAMPLE_CRITERIA.grade("t", autograder=PerCriterionOneShotGrader(lambda s, u: output))


@pytest.mark.parametrize(
    "bad", [None, 3, "no json here", {"criterion_status": "MAYBE"}, {"explanation": "x"}]
)
async def test_bad_generate_output_raises(bad: Any) -> None:
    with pytest.raises(GraderOutputError):
        await EXAMPLE_CRITERIA.grade("t", autograder=PerCriterionGrader(lambda s, u: bad))


# -- the built-in generate function on the LLM judge client -------------------------------------------------


def schema_aware_responder(body: dict[str, Any]) -> str:
    """Answers each grader's schema the way a judge model would (MET for positive criteria)."""
    user = body["messages"][1]["content"]
    name = body.get("response_format", {}).get("json_schema", {}).get("name")
    if name == "PerCriterionOutput":
        met = "<criterion_type>positive</criterion_type>" in user
        return json.dumps({"explanation": "checked", "criterion_status": "MET" if met else "UNMET"})
    if name == "OneShotOutput":
        n = user.count("<criterion_idx>")
        return json.dumps(
            {"criteria_evaluations": [{"criterion_idx": i, "criterion_status": "MET"} for i in range(n)]}
        )
    return json.dumps({"explanation": "fine", "overall_score": 80})


@pytest.fixture
def server() -> Iterator[JudgeServer]:
    with JudgeServer(responder=schema_aware_responder) as s:
        yield s


async def test_every_grader_runs_on_the_judge_client(server: JudgeServer) -> None:
    async with LLMJudgeClient(server.base_url, "m", backoff_initial_s=0.01, backoff_max_s=0.02) as client:
        server.inject("429", "truncated")  # retried inside the built-in generate function
        per = await EXAMPLE_CRITERIA.grade("t", PerCriterionGrader.from_client(client))
        one = await EXAMPLE_CRITERIA.grade("t", PerCriterionOneShotGrader.from_client(client))
        holistic = await EXAMPLE_CRITERIA.grade("t", RubricAsJudgeGrader.from_client(client, normalize=False))
    assert per.raw_score == 18.0 and per.score == 1.0  # 10 + 8 MET, the negative one UNMET
    assert one.raw_score == 3.0  # all MET: 10 + 8 - 15
    assert holistic.llm_raw_score == 80.0 and holistic.score == pytest.approx(14.4)  # 0.8 * 18
    assert client.stats.retries == 2 and client.stats.failures == 0
    assert server.requests[0]["response_format"]["json_schema"]["schema"]["required"] == ["criterion_status"]


async def test_built_in_generate_raises_after_the_last_retry(server: JudgeServer) -> None:
    server.inject(*["malformed"] * 6)
    async with LLMJudgeClient(server.base_url, "m", max_attempts=2, backoff_initial_s=0.01) as client:
        with pytest.raises(JudgeError, match="malformed"):
            await EXAMPLE_CRITERIA.grade("t", RubricAsJudgeGrader.from_client(client))
