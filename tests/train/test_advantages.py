"""Group advantages: hand-derived values, the arithmetic in comments."""

from __future__ import annotations

import math

import pytest

from train.advantages import batch_scale, group_advantages, sample_std, step_advantages

EPS = 1e-4


def test_group_scale_uses_sample_std() -> None:
    # rewards [1, 0, 1, 0]: mean 0.5; squared deviations 4 x 0.25 = 1.0; sample variance 1.0 / (4 - 1) = 1/3;
    # std sqrt(1/3) = 0.57735; advantage +-0.5 / (0.57735 + 1e-4) = +-0.865875
    g = group_advantages([1.0, 0.0, 1.0, 0.0], [False] * 4, scale="group")
    a = 0.5 / (math.sqrt(1 / 3) + EPS)
    assert a == pytest.approx(0.865875, abs=1e-6)
    assert g.advantages == pytest.approx([a, -a, a, -a])
    assert (g.zero_variance, g.healthy, g.mean) == (False, 4, 0.5)
    assert g.std == pytest.approx(math.sqrt(1 / 3))


def test_errored_rollouts_are_out_of_the_baseline_and_get_zero() -> None:
    # healthy rewards [1.0, 0.0, 0.5] (the 5.0 errored): mean 0.5; deviations [0.5, -0.5, 0];
    # squares sum 0.5; sample variance 0.5 / 2 = 0.25; std 0.5
    rewards, errored = [1.0, 0.0, 5.0, 0.5], [False, False, True, False]
    none = group_advantages(rewards, errored, scale="none")
    assert none.advantages == pytest.approx([0.5, -0.5, 0.0, 0.0])
    assert (none.healthy, none.mean, none.std) == (3, 0.5, 0.5)
    # scaled: 0.5 / (0.5 + 1e-4) = 0.99980004
    scaled = group_advantages(rewards, errored, scale="group")
    assert scaled.advantages == pytest.approx([0.99980004, -0.99980004, 0.0, 0.0])


def test_zero_variance_groups_are_flagged_and_zero() -> None:
    # all equal (0.1 + 0.2 is not exactly 0.3 in floats: the std is ~0, under the 1e-8 tolerance)
    g = group_advantages([0.3, 0.1 + 0.2, 0.3], [False] * 3)
    assert (g.zero_variance, g.healthy, g.advantages) == (True, 3, [0.0, 0.0, 0.0])
    # one healthy rollout: no std, no signal
    one = group_advantages([1.0, 0.2], [True, False])
    assert (one.zero_variance, one.healthy, one.advantages) == (True, 1, [0.0, 0.0])
    # every rollout errored
    none = group_advantages([1.0, 0.0], [True, True])
    assert (none.zero_variance, none.healthy, none.mean, none.advantages) == (True, 0, 0.0, [0.0, 0.0])


def test_batch_scale_divides_group_centred_rewards_by_the_batch_std() -> None:
    # groups [1, 0] and [2, 2]: group means 0.5 and 2 -> centred [0.5, -0.5] and [0, 0].
    # all rewards [1, 0, 2, 2]: mean 1.25; deviations [-0.25, -1.25, 0.75, 0.75];
    # squares 0.0625 + 1.5625 + 0.5625 + 0.5625 = 2.75; sample variance 2.75 / 3; std 0.957427
    groups = batch_scale([[1.0, 0.0], [2.0, 2.0]], [[False, False], [False, False]])
    std = math.sqrt(2.75 / 3)
    assert std == pytest.approx(0.957427, abs=1e-6)
    assert groups[0].advantages == pytest.approx([0.5 / (std + EPS), -0.5 / (std + EPS)])
    assert groups[1].advantages == [0.0, 0.0]
    assert [g.zero_variance for g in groups] == [False, True]


def test_batch_scale_leaves_errored_rewards_out_of_the_batch_std() -> None:
    # healthy rewards [1, 0] and [3, 1] (the 100.0 errored): centred [0.5, -0.5], [1, -1, 0];
    # all healthy [1, 0, 3, 1]: mean 1.25; squares 0.0625 + 1.5625 + 3.0625 + 0.0625 = 4.75; std sqrt(4.75 / 3)
    groups = batch_scale([[1.0, 0.0], [3.0, 1.0, 100.0]], [[False, False], [False, False, True]])
    d = math.sqrt(4.75 / 3) + EPS
    assert groups[0].advantages == pytest.approx([0.5 / d, -0.5 / d])
    assert groups[1].advantages == pytest.approx([1.0 / d, -1.0 / d, 0.0])


def test_step_advantages_dispatches_on_scale() -> None:
    rewards, errored = [[1.0, 0.0], [2.0, 2.0]], [[False, False], [False, False]]
    assert step_advantages(rewards, errored, "none")[0].advantages == [0.5, -0.5]
    # group [1, 0]: sample std sqrt(0.5 / 1) = 0.707107
    assert step_advantages(rewards, errored, "group")[0].advantages == pytest.approx(
        [0.5 / (math.sqrt(0.5) + EPS), -0.5 / (math.sqrt(0.5) + EPS)]
    )
    assert step_advantages(rewards, errored, "batch") == batch_scale(rewards, errored)


def test_sample_std_and_length_mismatch() -> None:
    assert sample_std([]) == 0.0
    assert sample_std([4.0]) == 0.0
    # [2, 4]: mean 3, squares 1 + 1 = 2, / (2 - 1) = 2
    assert sample_std([2.0, 4.0]) == pytest.approx(math.sqrt(2))
    with pytest.raises(ValueError, match="differ in length"):
        group_advantages([1.0, 0.0], [False])


def test_a_nan_reward_counts_as_errored() -> None:
    # [1, 0, NaN] (not flagged): healthy [1, 0], mean 0.5, none-scaled [0.5, -0.5, 0]
    g = group_advantages([1.0, 0.0, float("nan")], [False, False, False], scale="none")
    assert (g.advantages, g.healthy) == ([0.5, -0.5, 0.0], 2)
