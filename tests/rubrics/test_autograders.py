"""Autograders (the weighted-criteria example): exact formulas with hand-derived values, prompt structure, output schemas, and the
built-in generate function against the local judge server."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from rubrics.autograders import (
    CriterionEvaluation,
    GraderOutputError,
    OneShotOutput,
    PerCriterionGrader,
    PerCriterionOneShotGrader,
    PerCriterionOutput,
    RubricAsJudgeGrader,
    RubricAsJudgeOutput,
    per_criterion_score,
    prompts,
)
from rubrics.criteria import CriteriaRubric
from rubrics.judges import JudgeError, LLMJudgeClient
from tests.support.judge_server import JudgeServer

EXAMPLE_CRITERIA = CriteriaRubric.from_dict(
    [
        {"weight": 10.0, "requirement": "States Q4 2023 base margin as 17.2%"},
        {"weight": 8.0, "requirement": "Explicitly uses Shapley attribution for decomposition"},
        {"weight": -15.0, "requirement": "Uses total deliveries instead of cash-only deliveries"},
    ]
)


def verdicts_by_requirement(met: dict[str, bool]) -> Any:
    """A per-criterion generate_fn that reads the <criterion> tag and answers from ``met``."""

    def generate(system_prompt: str, user_prompt: str) -> PerCriterionOutput:
        requirement = re.search(r"<criterion>\n(.*?)\n</criterion>", user_prompt, re.DOTALL)
        assert requirement is not None
        status = "MET" if met[requirement.group(1)] else "UNMET"
        return PerCriterionOutput.model_validate(
            {"explanation": f"judged {status}", "criterion_status": status}
        )

    return generate


def per_criterion(weights: list[float], met: list[bool], normalize: bool = True) -> tuple[float, float]:
    return per_criterion_score(weights, met, normalize)


# -- formulas ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("met", "score", "raw"),
    [
        # weights 10, 8, -15: positive total = 10 + 8 = 18
        ([True, True, False], 1.0, 18.0),  # 18 / 18 = 1.0
        ([True, False, False], 10 / 18, 10.0),  # 10 / 18 = 0.5556
        ([True, True, True], 3 / 18, 3.0),  # (10 + 8 - 15) / 18 = 0.1667
        ([True, False, True], 0.0, -5.0),  # (10 - 15) / 18 = -0.278, clamped to 0
        ([False, False, False], 0.0, 0.0),  # 0 / 18 = 0
    ],
)
def test_mixed_signs(met: list[bool], score: float, raw: float) -> None:
    assert per_criterion([10.0, 8.0, -15.0], met) == (pytest.approx(score), raw)


@pytest.mark.parametrize(
    ("met", "score", "raw"),
    [
        # weights -5, -10, -5: no positive weight, sum |w| = 20, score = clamp(1 + raw / 20)
        ([False, False, False], 1.0, 0.0),  # 1 + 0 / 20 = 1.0: avoided every error
        ([True, False, False], 0.75, -5.0),  # 1 - 5 / 20 = 0.75
        ([False, True, True], 0.25, -15.0),  # 1 - 15 / 20 = 0.25
        ([True, True, True], 0.0, -20.0),  # 1 - 20 / 20 = 0.0: made every error
    ],
)
def test_all_negative(met: list[bool], score: float, raw: float) -> None:
    assert per_criterion([-5.0, -10.0, -5.0], met) == (pytest.approx(score), raw)


def test_negative_and_zero_weights_use_the_all_negative_rule() -> None:
    # weights -4, 0: positive total 0, sum |w| = 4; the -4 criterion MET: 1 + (-4) / 4 = 0.0
    assert per_criterion([-4.0, 0.0], [True, True]) == (0.0, -4.0)
    assert per_criterion([-4.0, 0.0], [False, True]) == (1.0, 0.0)


def test_all_zero_weights_have_a_defined_score() -> None:
    # nothing positive, nothing negative: no division; the score is defined as 0.0
    assert per_criterion([0.0, 0.0], [True, False]) == (0.0, 0.0)


def test_normalize_false_is_the_raw_sum() -> None:
    # 10 - 15 = -5, unclamped
    assert per_criterion([10.0, 8.0, -15.0], [True, False, True], normalize=False) == (-5.0, -5.0)


@pytest.mark.parametrize(
    ("llm", "normalize", "score", "raw"),
    [
        # weights 10, 8, -15: positive total 18; raw = llm / 100 * 18
        (50.0, True, 0.5, 9.0),  # 50 / 100 = 0.5; 0.5 * 18 = 9
        (135.0, True, 1.0, 24.3),  # 135 / 100 = 1.35, clamped to 1.0; raw 1.35 * 18 = 24.3
        (-10.0, True, 0.0, -1.8),  # -0.1 clamped to 0.0; raw -0.1 * 18 = -1.8
        (50.0, False, 9.0, 9.0),  # normalize=False: score = raw = 9
    ],
)
async def test_holistic_scoring(llm: float, normalize: bool, score: float, raw: float) -> None:
    grader = RubricAsJudgeGrader(
        lambda s, u: RubricAsJudgeOutput(explanation="x", overall_score=llm), normalize=normalize
    )
    result = await EXAMPLE_CRITERIA.grade("text", autograder=grader)
    assert result.score == pytest.approx(score) and result.raw_score == pytest.approx(raw)
    assert result.llm_raw_score == llm and result.report is None


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


# -- prompts ----------------------------------------------------------------------------------------------


async def test_per_criterion_prompt_structure() -> None:
    seen: list[tuple[str, str]] = []

    def generate(system_prompt: str, user_prompt: str) -> dict[str, str]:
        seen.append((system_prompt, user_prompt))
        return {"explanation": "", "criterion_status": "UNMET"}

    grader = PerCriterionGrader(generate, system_prompt="custom system")
    await EXAMPLE_CRITERIA.grade(
        {"thinking": "let me think", "output": "the answer"}, grader, query="the question"
    )
    systems, users = zip(*seen, strict=True)
    assert set(systems) == {"custom system"}
    positive = next(u for u in users if "17.2%" in u)
    negative = next(u for u in users if "total deliveries" in u)
    assert "<criterion_type>positive</criterion_type>" in positive
    assert "<criterion_type>negative</criterion_type>" in negative
    assert "<criterion>\nStates Q4 2023 base margin as 17.2%\n</criterion>" in positive
    assert "<query>\nthe question\n</query>" in positive
    assert re.search(
        r"<response>\s*<thinking>\s*let me think\s*</thinking>\s*<output>\s*the answer\s*</output>\s*</response>",
        positive,
    )


async def test_plain_text_response_and_no_query() -> None:
    users: list[str] = []

    def generate(system_prompt: str, user_prompt: str) -> dict[str, Any]:
        users.append(user_prompt)
        return {"explanation": "", "overall_score": 10}

    await EXAMPLE_CRITERIA.grade("just text", RubricAsJudgeGrader(generate))
    assert "<response>\njust text\n</response>" in users[0] and "<query>" not in users[0]
    assert 'weight="-15"' in users[0]
    with pytest.raises(ValueError, match="'output'"):
        await EXAMPLE_CRITERIA.grade({"thinking": "only thinking"}, RubricAsJudgeGrader(generate))


@pytest.mark.parametrize("grader", [PerCriterionGrader, PerCriterionOneShotGrader, RubricAsJudgeGrader])
async def test_reference_answer_block_only_when_given(grader: Any) -> None:
    users: list[str] = []
    replies: dict[Any, dict[str, Any]] = {
        PerCriterionGrader: {"criterion_status": "MET"},
        PerCriterionOneShotGrader: {
            "criteria_evaluations": [{"criterion_idx": i, "criterion_status": "MET"} for i in range(3)]
        },
        RubricAsJudgeGrader: {"overall_score": 50},
    }

    def generate(system_prompt: str, user_prompt: str) -> dict[str, Any]:
        users.append(user_prompt)
        return replies[grader]

    autograder = grader(generate)
    criteria = EXAMPLE_CRITERIA.criteria
    with_reference = await autograder.grade(criteria, "the answer", query="q", reference="17.2% by Shapley")
    given = list(users)
    without = await autograder.grade(criteria, "the answer", query="q")
    plain = users[len(given) :]
    assert with_reference.score == without.score  # the reference changes the prompt, not the scoring
    block = f"{prompts.REFERENCE_NOTE}\n<reference_answer>\n17.2% by Shapley\n</reference_answer>\n\n"
    for user in given:  # the query, then the note and the reference, then the response
        assert f"<query>\nq\n</query>\n\n{block}<response>\nthe answer\n</response>" in user
    assert not any("reference" in user for user in plain)
    assert [user.replace(block, "") for user in given] == plain  # otherwise the same prompts


def test_prompts_without_a_reference_are_unchanged() -> None:
    criterion = EXAMPLE_CRITERIA.criteria[2]
    # the library's layout, byte for byte
    assert prompts.per_criterion_prompt(criterion, "r", "q") == (
        "<criterion_type>negative</criterion_type>\n\n"
        "<criterion>\nUses total deliveries instead of cash-only deliveries\n</criterion>\n\n"
        "<query>\nq\n</query>\n\n<response>\nr\n</response>"
    )
    assert prompts.per_criterion_prompt(criterion, "r", "q", reference="") == prompts.per_criterion_prompt(
        criterion, "r", "q"
    )


def test_default_system_prompts_explain_negative_criteria() -> None:
    assert "negative" in PerCriterionGrader(lambda s, u: None).system_prompt
    assert "criterion_idx" in PerCriterionOneShotGrader(lambda s, u: None).system_prompt
    assert "0 to 100" in RubricAsJudgeGrader(lambda s, u: None).system_prompt


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
