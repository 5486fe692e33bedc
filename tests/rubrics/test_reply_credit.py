"""Credit per reply (``rubrics.advantages.assign_reply_advantages``): hand-derived values, the arithmetic in
comments. Each reply's reward-to-go is normalised among the group's replies at the same node."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from envs.rollout import ScoredRollout
from rubrics.advantages import (
    EPS,
    ReplyCredit,
    assign_advantages,
    assign_mixed_advantages,
    assign_reply_advantages,
)
from rubrics.types import State
from tests.support.rollouts import finished
from train.rollout_metrics import reply_credit_metrics


def rollout(reward: float, *credits: tuple[str, float], error: str | None = None) -> State:
    """A scored rollout whose replies answered ``credits`` (node, reward-to-go) in order."""
    state: State = {"reward": reward, "info": {"credits": [ReplyCredit(n, r) for n, r in credits]}}
    if error:
        state["error"] = error
    return state


def credit(state: State) -> Sequence[ReplyCredit]:
    return state["info"]["credits"]


def group() -> list[State]:
    """size_up -> hazard -> patient: one rollout goes three deep, one two, one stops at the root, one errors."""
    return [
        rollout(1.0, ("size_up", 1.0), ("hazard", 0.5), ("patient", 0.25)),
        rollout(0.75, ("size_up", 0.75), ("hazard", 0.25)),
        rollout(0.0, ("size_up", 0.0)),
        rollout(math.nan, error="judge: timeout"),
    ]


def test_group_scale_normalises_each_node_among_its_own_replies() -> None:
    states = group()
    (scored,) = assign_reply_advantages([states], credit, scale="group")
    # size_up: [1.0, 0.75, 0.0], mean 0.583333; deviations 0.416667, 0.166667, -0.583333; squares sum 0.541667;
    # sample variance 0.541667 / 2 = 0.270833, std 0.520416
    std = math.sqrt(0.541666666666666 / 2)
    assert std == pytest.approx(0.520416, abs=1e-6)
    root = [d / (std + EPS) for d in (1.0 - 0.583333333333333, 0.75 - 0.583333333333333, -0.583333333333333)]
    # hazard: [0.5, 0.25], mean 0.375, std sqrt(2 x 0.125^2 / 1) = 0.176777: +-0.125 / (0.176777 + 1e-4)
    hazard = 0.125 / (math.sqrt(2 * 0.125**2) + EPS)
    assert hazard == pytest.approx(0.706707, abs=1e-6)
    assert states[0]["reply_advantages"] == pytest.approx(
        [root[0], hazard, 0.0]
    )  # patient: alone, no baseline
    assert states[1]["reply_advantages"] == pytest.approx([root[1], -hazard])
    assert states[2]["reply_advantages"] == pytest.approx([root[2]])
    assert states[3]["reply_advantages"] == [] and states[3]["advantage"] == 0.0  # errored: nothing
    assert states[1]["reply_credit"] == [
        {"node": "size_up", "reward_to_go": 0.75},
        {"node": "hazard", "reward_to_go": 0.25},
    ]
    assert (scored.kept, scored.zero_variance) == (True, False)


def test_the_first_replys_advantage_is_the_episode_advantage_bit_for_bit() -> None:
    # every first reply answers the root with the rollout's reward: the same numbers the episode credit gives
    # (not under batch, whose std is over every reply of the step, not every rollout)
    for scale in ("group", "none"):
        per_reply, episode = group(), group()
        assign_reply_advantages([per_reply], credit, scale=scale)
        assign_advantages([episode], scale=scale)
        assert [s["advantage"] for s in per_reply] == [s["advantage"] for s in episode]


def test_mixed_credit_adds_the_weighted_node_term_to_the_episode_advantage() -> None:
    states = group()
    (scored,) = assign_mixed_advantages([states], credit, node_weight=0.5, scale="none")
    # none: episode advantages r - 0.583333 (the three healthy rewards' mean); node terms as in the test above:
    # size_up = the episode advantage, hazard +-0.125, the lone patient reply 0.0
    ep = [1.0 - 0.583333333, 0.75 - 0.583333333, 0.0 - 0.583333333]
    assert states[0]["reply_advantages"] == pytest.approx(
        [ep[0] * 1.5, ep[0] + 0.0625, ep[0]]
    )  # patient: ep only
    assert states[1]["reply_advantages"] == pytest.approx([ep[1] * 1.5, ep[1] - 0.0625])
    assert states[2]["reply_advantages"] == pytest.approx([ep[2] * 1.5])
    assert states[3]["reply_advantages"] == [] and states[3]["advantage"] == 0.0  # errored: nothing
    assert [s["advantage"] for s in states[:3]] == pytest.approx(
        ep
    )  # the rollout's advantage: the episode one
    assert (scored.kept, scored.zero_variance) == (True, False)
    # weight 0: exactly the episode advantage on every reply
    flat = group()
    assign_mixed_advantages([flat], credit, node_weight=0.0, scale="group")
    episode = group()
    assign_advantages([episode], scale="group")
    for mixed, plain in zip(flat, episode, strict=True):
        assert mixed["reply_advantages"] == [plain["advantage"]] * len(mixed["reply_advantages"])


def test_unscaled_and_batch_scaled_pools() -> None:
    states = group()
    assign_reply_advantages([states], credit, scale="none")
    # none: reward-to-go minus the node's mean; the lone patient reply gets r - r = 0.0
    assert states[0]["reply_advantages"] == pytest.approx([1.0 - 0.583333333, 0.125, 0.0])
    assert states[1]["reply_advantages"] == pytest.approx([0.75 - 0.583333333, -0.125])
    other = [rollout(0.5, ("size_up", 0.5)), rollout(0.0, ("size_up", 0.0))]
    assign_reply_advantages([states := group(), other], credit, scale="batch")
    # batch: (r - node mean) / (sample std of every healthy reply's reward-to-go in the step + eps); the step's
    # replies: 1.0, 0.5, 0.25, 0.75, 0.25, 0.0, 0.5, 0.0 (mean 0.40625)
    values = [1.0, 0.5, 0.25, 0.75, 0.25, 0.0, 0.5, 0.0]
    mean = sum(values) / 8
    denom = math.sqrt(sum((v - mean) ** 2 for v in values) / 7) + EPS
    assert states[0]["reply_advantages"] == pytest.approx([0.416666667 / denom, 0.125 / denom, 0.0])
    assert other[0]["reply_advantages"] == pytest.approx([0.25 / denom])


def test_a_group_without_signal_at_any_node_is_zero_variance_and_dropped_when_asked() -> None:
    # the root pool is flat (0.5, 0.5) and each deeper node has one reply: nothing anywhere to compare
    flat = [
        rollout(0.5, ("size_up", 0.5), ("hazard", 0.25)),
        rollout(0.5, ("size_up", 0.5), ("patient", 0.25)),
    ]
    (kept,) = assign_reply_advantages([flat], credit, scale="group")
    assert (kept.zero_variance, kept.kept) == (True, True)
    assert [s["reply_advantages"] for s in flat] == [[0.0, 0.0], [0.0, 0.0]]
    (dropped,) = assign_reply_advantages([flat], credit, scale="group", drop_zero_variance=True)
    assert dropped.kept is False
    # flat at the root but spread at a deeper node: signal, so kept even when flat groups are dropped
    deeper = [
        rollout(0.5, ("size_up", 0.5), ("hazard", 0.5)),
        rollout(0.5, ("size_up", 0.5), ("hazard", 0.0)),
    ]
    (scored,) = assign_reply_advantages([deeper], credit, scale="group", drop_zero_variance=True)
    assert scored.kept and deeper[0]["reply_advantages"][0] == 0.0 and deeper[0]["reply_advantages"][1] > 0
    errored = [rollout(math.nan, error="x"), rollout(math.nan, error="y")]
    (none_healthy,) = assign_reply_advantages([errored], credit, scale="group")
    assert none_healthy.kept is False


def test_nodes_are_pooled_within_a_group_only() -> None:
    # the same node in two groups (two scenarios) is two pools: each group has one hazard reply, alone in it
    a = [rollout(1.0, ("size_up", 1.0), ("hazard", 0.5)), rollout(0.0, ("size_up", 0.0))]
    b = [rollout(1.0, ("size_up", 1.0), ("hazard", 0.0)), rollout(0.0, ("size_up", 0.0))]
    assign_reply_advantages([a, b], credit, scale="group")
    assert a[0]["reply_advantages"][1] == 0.0 and b[0]["reply_advantages"][1] == 0.0


def test_per_node_metrics() -> None:
    states = group()
    assign_reply_advantages([states], credit, scale="none")
    metrics = reply_credit_metrics([ScoredRollout.from_state(finished(**s)) for s in states])
    assert metrics["credit/size_up/replies"] == 3.0
    assert metrics["credit/size_up/reward_to_go"] == pytest.approx(1.75 / 3)
    assert metrics["credit/hazard/advantage_abs"] == pytest.approx(0.125)
    assert metrics["credit/patient/zero_frac"] == 1.0 and metrics["credit/hazard/zero_frac"] == 0.0
    episode = ScoredRollout.from_state(finished(**rollout(1.0)))
    assert reply_credit_metrics([episode]) == {}  # episode credit: nothing per node
