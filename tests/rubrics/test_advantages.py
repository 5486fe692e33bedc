"""Group advantages (``rubrics.advantages``): hand-derived values, the arithmetic in comments; the rubric API's
``state["advantage"]`` equals the trainer's unscaled advantages (``episode_credit``)."""

from __future__ import annotations

import math

import pytest

from envs.rollout import rewards_and_errors
from rubrics import Rubric
from rubrics.advantages import (
    EPS,
    batch_scale,
    episode_credit,
    group_advantages,
    mean,
    sample_std,
    step_advantages,
)
from rubrics.types import Rollout


def test_group_scale_uses_sample_std() -> None:
    # rewards [1, 0, 1, 0]: mean 0.5; squared deviations 4 x 0.25 = 1.0; sample variance 1.0 / (4 - 1) = 1/3;
    # std sqrt(1/3) = 0.57735; advantage +-0.5 / (0.57735 + 1e-4) = +-0.865875
    g = group_advantages([1.0, 0.0, 1.0, 0.0], [False] * 4, scale="group")
    a = 0.5 / (math.sqrt(1 / 3) + EPS)
    assert a == pytest.approx(0.865875, abs=1e-6)
    assert g.advantages_G == pytest.approx([a, -a, a, -a])
    assert (g.zero_variance, g.healthy, g.mean) == (False, 4, 0.5)
    assert g.std == pytest.approx(math.sqrt(1 / 3))


def test_every_path_takes_one_mean_around_the_first_reward() -> None:
    # [1, 0, 0]: fsum 1 / 3 = 0.3333333333333333, but the mean around the first value,
    # 1 + fsum(0, -1, -1) / 3 = 1 - 0.6666666666666666, rounds to 0.33333333333333337; scaled and unscaled
    # advantages both subtract it
    rewards = [1.0, 0.0, 0.0]
    m = 1.0 + math.fsum([0.0, -1.0, -1.0]) / 3
    assert mean(rewards) == m == 0.33333333333333337 != math.fsum(rewards) / 3
    std = math.sqrt(math.fsum((r - m) ** 2 for r in rewards) / 2)
    g = group_advantages(rewards, [False] * 3, scale="group")
    assert g.mean == m
    assert g.advantages_G == [(r - m) / (std + EPS) for r in rewards]
    assert group_advantages(rewards, [False] * 3, scale="none").advantages_G == [r - m for r in rewards]
    # batch: the same group mean, divided by the batch std
    (b,) = batch_scale([rewards], [[False] * 3])
    assert b.mean == m and b.advantages_G == [(r - m) / (std + EPS) for r in rewards]


def test_errored_rollouts_are_out_of_the_baseline_and_get_zero() -> None:
    # healthy rewards [1.0, 0.0, 0.5] (the 5.0 errored): mean 0.5; deviations [0.5, -0.5, 0];
    # squares sum 0.5; sample variance 0.5 / 2 = 0.25; std 0.5
    rewards, errored = [1.0, 0.0, 5.0, 0.5], [False, False, True, False]
    none = group_advantages(rewards, errored, scale="none")
    assert none.advantages_G == [0.5, -0.5, 0.0, 0.0]
    assert (none.healthy, none.mean, none.std) == (3, 0.5, 0.5)
    # scaled: 0.5 / (0.5 + 1e-4) = 0.99980004
    scaled = group_advantages(rewards, errored, scale="group")
    assert scaled.advantages_G == pytest.approx([0.99980004, -0.99980004, 0.0, 0.0])


def test_zero_variance_groups_are_flagged_and_zero() -> None:
    # all equal (0.1 + 0.2 is not exactly 0.3 in floats: the std is ~0, under the 1e-8 tolerance)
    g = group_advantages([0.3, 0.1 + 0.2, 0.3], [False] * 3)
    assert (g.zero_variance, g.healthy, g.advantages_G) == (True, 3, [0.0, 0.0, 0.0])
    # one healthy rollout: no std, no signal
    one = group_advantages([1.0, 0.2], [True, False])
    assert (one.zero_variance, one.healthy, one.advantages_G) == (True, 1, [0.0, 0.0])
    # every rollout errored
    none = group_advantages([1.0, 0.0], [True, True])
    assert (none.zero_variance, none.healthy, none.mean, none.advantages_G) == (True, 0, 0.0, [0.0, 0.0])


def test_unscaled_equal_rewards_give_exactly_zero_without_a_tolerance() -> None:
    # fsum([0.1] * 3) / 3 = 0.10000000000000002; the mean 0.1 + fsum(0, 0, 0) / 3 is exactly 0.1
    assert math.fsum([0.1] * 3) / 3 != 0.1 and mean([0.1] * 3) == 0.1
    g = group_advantages([0.1, 0.1, 0.1, 7.0], [False, False, False, True], scale="none")
    assert (g.advantages_G, g.zero_variance, g.mean) == ([0.0, 0.0, 0.0, 0.0], True, 0.1)
    # unscaled, nothing is zeroed: [0.3, 0.1 + 0.2, 0.3] centred on 0.3: deviations [0, 2^-54, 0],
    # fsum / 3 = 1.85e-17 is under half an ulp of 0.3 (2.78e-17): baseline 0.3, advantages [0, 2^-54, 0]
    tiny = group_advantages([0.3, 0.1 + 0.2, 0.3], [False] * 3, scale="none")
    assert tiny.zero_variance
    assert tiny.advantages_G == [0.0, (0.1 + 0.2) - 0.3, 0.0]


def test_batch_scale_divides_group_centred_rewards_by_the_batch_std() -> None:
    # groups [1, 0] and [2, 2]: group means 0.5 and 2 -> centred [0.5, -0.5] and [0, 0].
    # all rewards [1, 0, 2, 2]: mean 1.25; deviations [-0.25, -1.25, 0.75, 0.75];
    # squares 0.0625 + 1.5625 + 0.5625 + 0.5625 = 2.75; sample variance 2.75 / 3; std 0.957427
    groups = batch_scale([[1.0, 0.0], [2.0, 2.0]], [[False, False], [False, False]])
    std = math.sqrt(2.75 / 3)
    assert std == pytest.approx(0.957427, abs=1e-6)
    assert groups[0].advantages_G == pytest.approx([0.5 / (std + EPS), -0.5 / (std + EPS)])
    assert groups[1].advantages_G == [0.0, 0.0]
    assert [g.zero_variance for g in groups] == [False, True]


def test_batch_scale_leaves_errored_rewards_out_of_the_batch_std() -> None:
    # healthy rewards [1, 0] and [3, 1] (the 100.0 errored): centred [0.5, -0.5], [1, -1, 0];
    # all healthy [1, 0, 3, 1]: mean 1.25; squares 0.0625 + 1.5625 + 3.0625 + 0.0625 = 4.75; std sqrt(4.75 / 3)
    groups = batch_scale([[1.0, 0.0], [3.0, 1.0, 100.0]], [[False, False], [False, False, True]])
    d = math.sqrt(4.75 / 3) + EPS
    assert groups[0].advantages_G == pytest.approx([0.5 / d, -0.5 / d])
    assert groups[1].advantages_G == pytest.approx([1.0 / d, -1.0 / d, 0.0])


def test_step_advantages_dispatches_on_scale() -> None:
    rewards, errored = [[1.0, 0.0], [2.0, 2.0]], [[False, False], [False, False]]
    assert step_advantages(rewards, errored, "none")[0].advantages_G == [0.5, -0.5]
    # group [1, 0]: sample std sqrt(0.5 / 1) = 0.707107
    assert step_advantages(rewards, errored, "group")[0].advantages_G == pytest.approx(
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
    assert (g.advantages_G, g.healthy) == ([0.5, -0.5, 0.0], 2)


async def test_rubric_api_and_trainer_give_the_same_unscaled_advantages() -> None:
    def score(completion: str) -> float:
        if completion == "boom":
            raise RuntimeError("judge unavailable")
        return float(completion)

    # rewards [1, 0, 0, err, 0.7]: healthy mean 1 + fsum(0, -1, -1, -0.3) / 4 = 0.42500000000000004 on both paths
    states = [{"completion": c} for c in ("1", "0", "0", "boom", "0.7")]
    await Rubric(funcs=[score]).score_group(states)
    assert states[3]["error"] and math.isnan(states[3]["reward"])
    # the trainer's path: the scored states as typed rollouts, their rewards, the unscaled episode credit
    rewards_NG, errored_NG = rewards_and_errors([[Rollout.from_state(s) for s in states]])
    assert errored_NG == [[False, False, False, True, False]]
    (trainer,) = episode_credit(rewards_NG, errored_NG, "none")
    advantages_G = [c.advantage for c in trainer.rollouts_G]
    assert [s["advantage"] for s in states] == advantages_G  # exactly, errored rollout included
    # healthy [1, 0, 0, 0.7]: mean 1.7 / 4 = 0.425
    assert advantages_G == pytest.approx([0.575, -0.425, -0.425, 0.0, 0.275])
    assert (trainer.zero_variance, trainer.kept) == (False, True)
