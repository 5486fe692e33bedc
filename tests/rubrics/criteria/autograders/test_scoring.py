"""The autograders' scores: exact formulas with hand-derived values (mixed signs, all negative, zero weights,
unnormalised sums, holistic scores)."""

from __future__ import annotations

import pytest

from rubrics.criteria.autograders import (
    RubricAsJudgeGrader,
    RubricAsJudgeOutput,
)

from .helpers import EXAMPLE_CRITERIA, per_criterion

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
