"""An evaluation's summary statistics, computed by hand."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("transformers")


from envs.evaluation import format_summary, summarize
from rubrics.types import EvaluationResult, RequirementResult
from tests.support.rollouts import scored


def verdicts(*judged: tuple[str, bool]) -> EvaluationResult:
    return EvaluationResult([RequirementResult(name, 0, 1.0, 1.0, correct) for name, correct in judged])


def test_summary_statistics_by_hand() -> None:
    states = [
        scored(
            scenario="a",
            reward=1.0,
            metrics={"depth": 2.0},
            stop_reason="terminal",
            completion=[{"content": "a"}],
            multistep=verdicts(("x", True), ("y", True)),
        ),
        scored(
            scenario="b",
            reward=0.0,
            metrics={"depth": 0.0},
            stop_reason="incorrect",
            completion=[{"content": "b"}],
            multistep=verdicts(("x", False)),
        ),
        scored(
            scenario="b",
            reward=0.5,
            metrics={"depth": 1.0},
            stop_reason="max_turns",
            completion=[{"content": "a"}],
            multistep=verdicts(("x", True)),
        ),
        scored(reward=math.nan, error="judge gone", stop_reason="error", completion=[{"content": "c"}]),
    ]
    s = summarize(states, wall_s=2.0, examples=2)
    # healthy rewards 1.0 (scenario a), 0.0 and 0.5 (b): mean 0.5, sample variance (0.25 + 0.25 + 0) / 2 = 0.25,
    # std 0.5. Interval clustered by scenario: residual sums a +0.5, b -0.5 + 0 = -0.5; variance
    # 2 / 1 * (0.25 + 0.25) / 3^2 = 1/9, se 1/3; t with 1 degree of freedom 12.706: half-width 4.2353
    assert s.reward_mean == pytest.approx(0.5) and s.reward_std == pytest.approx(0.5)
    assert s.reward_ci95 == pytest.approx(12.706 / 3)
    # one scenario is one piece of evidence: no interval
    assert math.isnan(summarize(states[:1], wall_s=1.0, examples=1).reward_ci95)
    assert s.errored == 1 and s.pass_rates == {"x": (2, 3), "y": (1, 1)}
    assert s.depth == {0: 2, 1: 1, 2: 1} and s.stop_reasons["error"] == 1
    assert s.distinct_fraction == 3 / 4
    assert "x  " in format_summary(s) and "66.7%" in format_summary(s)
