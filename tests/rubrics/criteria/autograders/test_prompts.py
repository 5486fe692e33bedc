"""The graders' prompts: structure, plain text and no query, the reference answer block only when given,
and system prompts that explain negative criteria."""

from __future__ import annotations

import re
from typing import Any

import pytest

from rubrics.criteria.autograders import (
    PerCriterionGrader,
    PerCriterionOneShotGrader,
    RubricAsJudgeGrader,
    prompts,
)

from .helpers import EXAMPLE_CRITERIA

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
