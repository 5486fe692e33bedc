"""MathRubric: math-verify in a process pool."""

from __future__ import annotations

import pytest

from rubrics import MathRubric, ThinkParser
from rubrics.math_rubric import extract_boxed


def test_extract_boxed_balances_braces() -> None:
    assert extract_boxed(r"so \boxed{\frac{1}{2}} done") == r"\frac{1}{2}"
    assert extract_boxed(r"\boxed{1} then \boxed{2}") == "2"
    assert extract_boxed("no box") is None
    assert extract_boxed(r"\boxed{unclosed") is None


@pytest.mark.slow
async def test_math_rubric_verifies_equivalent_answers() -> None:
    rubric = MathRubric(parser=ThinkParser())
    try:
        states = [
            {
                "completion": [{"role": "assistant", "content": r"<think>1/2</think> \boxed{\frac{1}{2}}"}],
                "answer": "0.5",
            },
            {
                "completion": [
                    {"role": "assistant", "content": r"<think>..</think> The answer is \boxed{3}."}
                ],
                "answer": "4",
            },
            {"completion": [{"role": "assistant", "content": "<think>..</think> 4."}], "answer": "4"},
            {"completion": [{"role": "assistant", "content": "<think>never closed"}], "answer": "4"},
        ]
        await rubric.score_group(states)
        assert [s["reward"] for s in states] == [1.0, 0.0, 1.0, 0.0]
        assert all("error" not in s for s in states)
        assert states[0]["metrics"] == {"correct_answer": 1.0}
    finally:
        rubric.close()
