"""The paired change of ``report.md`` takes its ± from ``clustered_mean_ci`` and keeps the old numbers."""

from __future__ import annotations

import math
import random

import pytest

from rubrics.intervals import clustered_mean_ci, t95
from rubrics.multistep.probe import PolicyScore, paired_difference


def _old_paired(diffs: list[float]) -> tuple[float, float]:
    """The paired t-interval as ``paired_difference`` derived it by hand before ``clustered_mean_ci``."""
    mean = math.fsum(diffs) / len(diffs)
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
    return mean, t95(len(diffs) - 1) * sd / math.sqrt(len(diffs))


def test_paired_difference_by_hand() -> None:
    a = PolicyScore("a", scenario_rewards={"s1": 1.5, "s2": 2.5, "s3": 4.5, "s4": 5.5, "only_a": 9.0})
    b = PolicyScore("b", scenario_rewards={"s1": 0.5, "s2": 0.5, "s3": 0.5, "s4": 0.5, "only_b": 7.0})
    # differences over the 4 shared scenarios: 1, 2, 4, 5; mean 3; residuals -2, -1, 1, 2; sum of squares 10
    # clustered (G = N = 4): sqrt(4 / 3 * 10 / 4^2) = sqrt(10 / 12) = 0.912871
    # ordinary paired:       sqrt(10 / (4 * 3))     = sqrt(10 / 12) = 0.912871
    # half-width = t95(3) * 0.912871 = 3.182 * 0.912871 = 2.904756
    mean, half, n = paired_difference(a, b)
    assert (mean, n) == (3.0, 4)
    assert half == pytest.approx(3.182 * math.sqrt(10 / 12)) and half == pytest.approx(2.904756, abs=1e-6)


def test_paired_difference_without_two_scenarios_has_no_interval() -> None:
    one = paired_difference(
        PolicyScore("a", scenario_rewards={"s1": 0.75}), PolicyScore("b", scenario_rewards={"s1": 0.5})
    )
    assert one[0] == 0.25 and math.isnan(one[1]) and one[2] == 1
    none = paired_difference(
        PolicyScore("a", scenario_rewards={"s1": 1.0}), PolicyScore("b", scenario_rewards={"s2": 0.5})
    )
    assert math.isnan(none[0]) and math.isnan(none[1]) and none[2] == 0


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_one_value_per_cluster_is_the_ordinary_paired_interval(seed: int) -> None:
    rng = random.Random(seed)
    size = rng.choice([2, 3, 7, 31, 50])  # t95 from the table and past it (the normal 1.96)
    diffs = [rng.uniform(-1.0, 1.0) for _ in range(size)]
    names = [f"s{i}" for i in range(size)]
    mean, half = clustered_mean_ci(diffs, names)
    old_mean, old_half = _old_paired(diffs)
    assert mean == old_mean and half == pytest.approx(old_half, rel=1e-12)
    a = PolicyScore("a", scenario_rewards={k: d + 0.5 for k, d in zip(names, diffs, strict=True)})
    b = PolicyScore("b", scenario_rewards=dict.fromkeys(names, 0.5))
    got_mean, got_half, n = paired_difference(a, b)
    assert n == size
    assert got_mean == pytest.approx(old_mean, rel=1e-12) and got_half == pytest.approx(old_half, rel=1e-12)
