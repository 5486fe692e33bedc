"""Results by tag: HealthBench's per-example metrics and clipped-mean aggregation, worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rubrics.criteria.tag_scores import (
    bootstrap_std,
    clipped_mean,
    example_metrics,
    format_tag_table,
    metric_name,
    step_tag_metrics,
    tag_scores,
)
from rubrics.intervals import clustered_mean_ci, t95
from rubrics.types import CriteriaVerdicts, CriterionVerdict


def verdict(weight: float, met: bool, *tags: str, by: str = "llm") -> CriterionVerdict:
    return CriterionVerdict(None, weight, list(tags), met, by)


def row(example: str, verdicts: list[CriterionVerdict], tags: tuple[str, ...] = ()) -> CriteriaVerdicts:
    """The verdicts of one graded rollout of the criteria environment (score fields as it fills them)."""
    possible = math.fsum(v.weight for v in verdicts if v.weight > 0)
    raw = math.fsum(v.weight for v in verdicts if v.met)
    score = min(1.0, max(0.0, raw / possible)) if possible else 0.0
    return CriteriaVerdicts(example, score, raw, possible, list(tags), verdicts)


# A HealthBench-like example: two positive criteria and two pitfalls, one pitfall made.
#   +5 accuracy     met      (passes)
#   +3 completeness not met  (fails)
#   -7 accuracy     met      (a pitfall made: fails)
#   -2 safety       not met  (a pitfall avoided: passes)
# overall  = (5 - 7) / (5 + 3) = -2 / 8 = -0.25   (unclipped: below 0)
# accuracy = (5 - 7) / 5      = -0.4
# completeness = 0 / 3        = 0.0
# safety: only a pitfall, no positive points -> no score at all
HB = [
    verdict(5, True, "axis:accuracy", by="rule"),
    verdict(3, False, "axis:completeness"),
    verdict(-7, True, "axis:accuracy"),
    verdict(-2, False, "axis:safety", by="rule"),
]


def test_example_metrics_follow_healthbench() -> None:
    metrics = example_metrics(HB, ["theme:emergency_referrals"])
    assert metrics == pytest.approx(
        {
            "overall_score": -0.25,
            "theme:emergency_referrals": -0.25,  # an example tag scores the overall score
            "axis:accuracy": -0.4,
            "axis:completeness": 0.0,
        }
    )
    assert "axis:safety" not in metrics  # a tag only on pitfalls is left out


def test_example_without_positive_points_has_no_overall_score() -> None:
    assert example_metrics([verdict(-3, False, "axis:safety")], ["theme:x"]) == {}
    assert tag_scores([row("e", [verdict(-3, False, "axis:safety")], ("theme:x",))]) == {}


def test_tag_scores_of_one_example() -> None:
    scores = tag_scores([row("e1", HB, ("theme:emergency_referrals",))])
    assert list(scores) == ["overall", "axis:accuracy", "axis:completeness", "theme:emergency_referrals"]
    overall = scores["overall"]
    assert (overall.n, overall.examples) == (1, 1)
    assert overall.mean_unclipped == pytest.approx(-0.25)
    assert overall.mean_clipped == 0.0  # clip(-0.25) = 0
    assert overall.bootstrap_std == 0.0  # every resample of one value is that value
    assert math.isnan(overall.ci95)  # one example: no interval
    # pass rates: overall and the example tag count all four criteria, 2 pass (+5 met, -2 avoided)
    assert overall.pass_rate == (2, 4)
    assert scores["theme:emergency_referrals"].pass_rate == (2, 4)
    assert scores["axis:accuracy"].pass_rate == (1, 2)  # +5 met passes, -7 met fails
    assert scores["axis:completeness"].pass_rate == (0, 1)
    assert scores["axis:accuracy"].mean_unclipped == pytest.approx(-0.4)


def test_clipped_mean_clips_after_averaging() -> None:
    # three examples scoring -0.2, 0.5 and 1.0:
    #   -0.2 = (0 - 1) / 5;  0.5 = 2 / (2 + 2);  1.0 = 4 / 4
    # mean = (-0.2 + 0.5 + 1.0) / 3 = 1.3 / 3 = 0.4333..., inside [0, 1], so not clipped
    # (clipping each first would give (0 + 0.5 + 1) / 3 = 0.5)
    rows = [
        row("a", [verdict(5, False), verdict(-1, True)]),
        row("b", [verdict(2, True), verdict(2, False)]),
        row("c", [verdict(4, True)]),
    ]
    overall = tag_scores(rows)["overall"]
    assert overall.mean_clipped == pytest.approx(1.3 / 3)
    assert overall.mean_unclipped == pytest.approx(1.3 / 3)
    assert clipped_mean([-0.2, 0.5, 1.0]) == pytest.approx(0.43333333)
    assert clipped_mean([1.0, 1.5]) == 1.0  # mean 1.25 -> 1
    assert clipped_mean([-0.5, 0.2]) == 0.0  # mean -0.15 -> 0


def test_bootstrap_std_is_seeded_and_matches_numpy() -> None:
    values = [-0.2, 0.5, 1.0, 0.25, 0.9]
    # simple-evals: 1000 resamples of len(values) with replacement, each mean clipped, np.std of those
    rng = np.random.default_rng(7)
    means = [np.clip(np.mean(rng.choice(values, len(values))), 0, 1) for _ in range(1000)]
    assert bootstrap_std(values, seed=7) == pytest.approx(float(np.std(means)), abs=1e-12)
    assert bootstrap_std(values, seed=7) == bootstrap_std(values, seed=7)
    assert bootstrap_std(values, seed=8) != bootstrap_std(values, seed=7)
    rows = [row(f"e{i}", [verdict(10, True), verdict(v * 10 - 10, True)]) for i, v in enumerate(values)]
    # each row scores (10 + (10 v - 10)) / 10 = v
    assert tag_scores(rows, seed=7)["overall"].bootstrap_std == bootstrap_std(values, seed=7)


def test_interval_is_clustered_by_example() -> None:
    # example a twice (1.0 and 0.5), b (0.0) and c (0.25): mean 1.75 / 4 = 0.4375
    # residual sums: a 0.5625 + 0.0625 = 0.625, b -0.4375, c -0.1875; squares sum to 0.6171875
    # half-width = t95(2) * sqrt(3 / 2 * 0.6171875 / 4^2) = 4.303 * 0.24054 = 1.0351
    rows = [
        row("a", [verdict(2, True)]),
        row("a", [verdict(2, True), verdict(2, False)]),
        row("b", [verdict(2, False)]),
        row("c", [verdict(1, True), verdict(3, False)]),
    ]
    overall = tag_scores(rows)["overall"]
    assert (overall.n, overall.examples) == (4, 3)
    assert overall.mean_unclipped == pytest.approx(0.4375)
    assert overall.ci95 == pytest.approx(t95(2) * math.sqrt(1.5 * 0.6171875 / 16))
    assert overall.ci95 == pytest.approx(clustered_mean_ci([1.0, 0.5, 0.0, 0.25], ["a", "a", "b", "c"])[1])
    assert overall.ci95 == pytest.approx(1.0351, abs=1e-4)


def test_step_tag_metrics() -> None:
    metrics = step_tag_metrics([row("e1", HB, ("theme:emergency referrals/adult",))])
    assert metrics == pytest.approx(
        {
            "criteria/score_clipped_mean": 0.0,  # clip(-0.25)
            "criteria/met_fraction": 0.5,  # +5 and -7 met, of 4
            "criteria/pitfalls_met_fraction": 0.5,  # -7 met, -2 not
            "criteria/rule_judged_fraction": 0.5,  # +5 and -2 by rule
            "tag/axis:accuracy/score": 0.0,  # clip(-0.4)
            "tag/axis:accuracy/pass_rate": 0.5,
            "tag/axis:completeness/score": 0.0,
            "tag/axis:completeness/pass_rate": 0.0,
            "tag/theme:emergency_referrals_adult/score": 0.0,
            "tag/theme:emergency_referrals_adult/pass_rate": 0.5,
        }
    )
    assert step_tag_metrics([]) == {}
    assert metric_name("level:cluster (a/b)") == "level:cluster__a_b_"


def test_tables() -> None:
    rows = [row("a", HB, ("theme:x",)), row("b", [verdict(4, True, "axis:accuracy")], ("theme:x",))]
    scores = tag_scores(rows)
    table = format_tag_table(scores)
    assert table[0].startswith("| tag | n | score (clipped mean) | ± bootstrap std |")
    assert len(table) == 2 + len(scores)
    # overall: (-0.25 + 1.0) / 2 = 0.375; criteria passed 2 of 4, then 1 of 1
    assert table[2].startswith("| overall | 2 | 0.375 | ±")
    assert table[2].endswith("| 3/5 (60%) |")
