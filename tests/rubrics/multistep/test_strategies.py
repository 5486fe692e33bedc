"""Reward strategies with hand-derived values.

The walk used throughout: levels 0, 1, 1, 2, 3 judged; correct at levels 0, 1, 2; incorrect at 1 and 3.
The ideal (ground-truth) walk has 5 requirements at levels 0, 1, 1, 2, 3.
"""

from __future__ import annotations

import pytest

from rubrics.multistep import STRATEGIES, RewardStrategy
from rubrics.multistep.walk import RequirementResult


def R(level: int, correct: bool) -> RequirementResult:
    return RequirementResult(name=f"r{level}{correct}", level=level, answer=1.0, truth=1.0, correct=correct)


RESULTS = [R(0, True), R(1, True), R(1, False), R(2, True), R(3, False)]
IDEAL = [R(0, True), R(1, True), R(1, True), R(2, True), R(3, True)]


@pytest.mark.parametrize(
    ("name", "raw", "normalized"),
    [
        # 3 correct; ideal 5
        ("sum", 3.0, 3 / 5),
        # 3 correct of 5 judged; ideal 5/5 = 1
        ("mean", 3 / 5, 3 / 5),
        # (1 + 0.5*0) + (1 + 0.5*1) + (1 + 0.5*2) = 1 + 1.5 + 2 = 4.5; ideal 1 + 1.5 + 1.5 + 2 + 2.5 = 8.5
        ("level_weighted", 4.5, 4.5 / 8.5),
        # 1.5**0 + 1.5**1 + 1.5**2 = 1 + 1.5 + 2.25 = 4.75; ideal 1 + 1.5 + 1.5 + 2.25 + 3.375 = 9.625
        ("progressive", 4.75, 4.75 / 9.625),
        # deepest correct level 2 -> 3 levels reached; ideal 4
        ("level_based", 3.0, 3 / 4),
        # 3 correct / 5 on the ideal path, already a ratio; ideal 5/5 = 1
        ("completion_ratio", 3 / 5, 3 / 5),
    ],
)
def test_strategy_values(name: str, raw: float, normalized: float) -> None:
    assert RewardStrategy(name, normalized=False)(RESULTS, IDEAL) == pytest.approx(raw)
    assert RewardStrategy(name)(RESULTS, IDEAL) == pytest.approx(normalized)
    assert 0.0 <= RewardStrategy(name)(RESULTS, IDEAL) <= 1.0
    assert RewardStrategy(name)(IDEAL, IDEAL) == pytest.approx(1.0)


def test_every_strategy_is_tested_and_empty_walks_are_zero() -> None:
    assert set(STRATEGIES) == {
        "sum",
        "mean",
        "level_weighted",
        "progressive",
        "level_based",
        "completion_ratio",
    }
    for name in STRATEGIES:
        assert RewardStrategy(name)([], []) == 0.0
        assert RewardStrategy(name)([], IDEAL) == 0.0


def test_parameters_change_the_formula() -> None:
    # level_bonus 1.0: (1 + 0) + (1 + 1) + (1 + 2) = 6
    assert (
        RewardStrategy("level_weighted", normalized=False, params={"level_bonus": 1.0}).raw(RESULTS, IDEAL)
        == 6.0
    )
    # growth 2: 1 + 2 + 4 = 7
    assert RewardStrategy("progressive", normalized=False, params={"growth": 2.0}).raw(RESULTS, IDEAL) == 7.0


def test_strategy_config_errors() -> None:
    with pytest.raises(ValueError, match="field 'type' must be one of"):
        RewardStrategy("median")
    with pytest.raises(ValueError, match="'sum' has no parameter 'growth' \\(allowed: none\\)"):
        RewardStrategy("sum", params={"growth": 2.0})
    with pytest.raises(ValueError, match="'growth' must be a positive number \\(got true\\)"):
        RewardStrategy("progressive", params={"growth": True})  # bool is an int subclass in Python
    with pytest.raises(ValueError, match="'normalized' must be true or false"):
        RewardStrategy.from_dict({"type": "sum", "normalized": "yes"})
    assert RewardStrategy.from_dict(
        {"type": "progressive", "growth": 2.0, "normalized": False}
    ) == RewardStrategy("progressive", False, {"growth": 2.0})
