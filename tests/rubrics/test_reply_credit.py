"""Credit per reply (``rubrics.advantages.reply_credit_per_node``): hand-derived values, the arithmetic in
comments. Each reply's reward-to-go is normalised among the group's replies at the same node."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from envs.rollout import ScoredRollout, rewards_and_errors
from rubrics.advantages import (
    EPS,
    GroupCredit,
    ReplyCredit,
    RolloutCredit,
    Scale,
    episode_credit,
    mixed_credit,
    reply_credit_per_node,
)
from rubrics.types import Rollout
from train.rollout_metrics import reply_credit_metrics


def rollout(reward: float, *credits: tuple[str, float], error: str | None = None) -> Rollout:
    """A scored rollout whose replies answered ``credits`` (node, reward-to-go) in order."""
    scored = Rollout(prompt="", reward=reward, stop_reason="completed", info={"credits": credits})
    if error:
        scored.fail("JudgeError", error)
    return scored


def credits_of(rollout: Rollout) -> list[ReplyCredit]:
    """What the environment's ``reply_credit`` says of the rollout's replies."""
    return [ReplyCredit(node, reward_to_go) for node, reward_to_go in rollout.info["credits"]]


def per_reply(
    groups: Sequence[Sequence[Rollout]], scale: Scale, drop_zero_variance: bool = False
) -> list[GroupCredit]:
    """``reply_credit_per_node`` over the groups' rewards and reply credits, as the orchestrator calls it."""
    rewards_NG, errored_NG = rewards_and_errors(groups)
    credits_NG = [[credits_of(r) for r in g] for g in groups]
    return reply_credit_per_node(rewards_NG, errored_NG, credits_NG, scale, drop_zero_variance)


def mixed(groups: Sequence[Sequence[Rollout]], node_weight: float, scale: Scale) -> list[GroupCredit]:
    """``mixed_credit`` over the groups' rewards and reply credits."""
    rewards_NG, errored_NG = rewards_and_errors(groups)
    credits_NG = [[credits_of(r) for r in g] for g in groups]
    return mixed_credit(rewards_NG, errored_NG, credits_NG, node_weight, scale)


def episode(groups: Sequence[Sequence[Rollout]], scale: Scale) -> list[GroupCredit]:
    """``episode_credit`` over the groups' rewards."""
    return episode_credit(*rewards_and_errors(groups), scale)


def replies(group: GroupCredit) -> list[list[float] | None]:
    """Each rollout's reply advantages."""
    return [c.reply_advantages for c in group.rollouts_G]


def advantages(group: GroupCredit) -> list[float]:
    """Each rollout's advantage."""
    return [c.advantage for c in group.rollouts_G]


def group() -> list[Rollout]:
    """size_up -> hazard -> patient: one rollout goes three deep, one two, one stops at the root, one errors."""
    return [
        rollout(1.0, ("size_up", 1.0), ("hazard", 0.5), ("patient", 0.25)),
        rollout(0.75, ("size_up", 0.75), ("hazard", 0.25)),
        rollout(0.0, ("size_up", 0.0)),
        rollout(math.nan, error="judge: timeout"),
    ]


def test_group_scale_normalises_each_node_among_its_own_replies() -> None:
    (scored,) = per_reply([group()], scale="group")
    rollouts = scored.rollouts_G
    # size_up: [1.0, 0.75, 0.0], mean 0.583333; deviations 0.416667, 0.166667, -0.583333; squares sum 0.541667;
    # sample variance 0.541667 / 2 = 0.270833, std 0.520416
    std = math.sqrt(0.541666666666666 / 2)
    assert std == pytest.approx(0.520416, abs=1e-6)
    root = [d / (std + EPS) for d in (1.0 - 0.583333333333333, 0.75 - 0.583333333333333, -0.583333333333333)]
    # hazard: [0.5, 0.25], mean 0.375, std sqrt(2 x 0.125^2 / 1) = 0.176777: +-0.125 / (0.176777 + 1e-4)
    hazard = 0.125 / (math.sqrt(2 * 0.125**2) + EPS)
    assert hazard == pytest.approx(0.706707, abs=1e-6)
    assert rollouts[0].reply_advantages == pytest.approx(
        [root[0], hazard, 0.0]
    )  # patient: alone, no baseline
    assert rollouts[1].reply_advantages == pytest.approx([root[1], -hazard])
    assert rollouts[2].reply_advantages == pytest.approx([root[2]])
    assert rollouts[3] == RolloutCredit(0.0, [], [])  # errored: nothing
    assert rollouts[1].reply_credit == [ReplyCredit("size_up", 0.75), ReplyCredit("hazard", 0.25)]
    assert [c.advantage for c in rollouts[:3]] == [r[0] for r in replies(scored)[:3]]  # the first reply's
    assert (scored.kept, scored.zero_variance) == (True, False)


def test_the_first_replys_advantage_is_the_episode_advantage_bit_for_bit() -> None:
    # every first reply answers the root with the rollout's reward: the same numbers the episode credit gives
    # (not under batch, whose std is over every reply of the step, not every rollout)
    for scale in ("group", "none"):
        (by_reply,), (by_episode,) = per_reply([group()], scale), episode([group()], scale)
        assert advantages(by_reply) == advantages(by_episode)


def test_mixed_credit_adds_the_weighted_node_term_to_the_episode_advantage() -> None:
    (scored,) = mixed([group()], node_weight=0.5, scale="none")
    rollouts = scored.rollouts_G
    # none: episode advantages r - 0.583333 (the three healthy rewards' mean); node terms as in the test above:
    # size_up = the episode advantage, hazard +-0.125, the lone patient reply 0.0
    ep = [1.0 - 0.583333333, 0.75 - 0.583333333, 0.0 - 0.583333333]
    assert rollouts[0].reply_advantages == pytest.approx(
        [ep[0] * 1.5, ep[0] + 0.0625, ep[0]]
    )  # patient: ep only
    assert rollouts[1].reply_advantages == pytest.approx([ep[1] * 1.5, ep[1] - 0.0625])
    assert rollouts[2].reply_advantages == pytest.approx([ep[2] * 1.5])
    assert rollouts[3].reply_advantages == [] and rollouts[3].advantage == 0.0  # errored: nothing
    assert advantages(scored)[:3] == pytest.approx(ep)  # the rollout's advantage: the episode one
    assert rollouts[1].reply_credit == [ReplyCredit("size_up", 0.75), ReplyCredit("hazard", 0.25)]
    assert (scored.kept, scored.zero_variance) == (True, False)
    # weight 0: exactly the episode advantage on every reply
    (flat,), (plain,) = mixed([group()], node_weight=0.0, scale="group"), episode([group()], scale="group")
    for got, want in zip(flat.rollouts_G, plain.rollouts_G, strict=True):
        assert got.reply_advantages is not None
        assert got.reply_advantages == [want.advantage] * len(got.reply_advantages)


def test_unscaled_and_batch_scaled_pools() -> None:
    (unscaled,) = per_reply([group()], scale="none")
    # none: reward-to-go minus the node's mean; the lone patient reply gets r - r = 0.0
    assert replies(unscaled)[0] == pytest.approx([1.0 - 0.583333333, 0.125, 0.0])
    assert replies(unscaled)[1] == pytest.approx([0.75 - 0.583333333, -0.125])
    other = [rollout(0.5, ("size_up", 0.5)), rollout(0.0, ("size_up", 0.0))]
    main, others = per_reply([group(), other], scale="batch")
    # batch: (r - node mean) / (sample std of every healthy reply's reward-to-go in the step + eps); the step's
    # replies: 1.0, 0.5, 0.25, 0.75, 0.25, 0.0, 0.5, 0.0 (mean 0.40625)
    values = [1.0, 0.5, 0.25, 0.75, 0.25, 0.0, 0.5, 0.0]
    mean = sum(values) / 8
    denom = math.sqrt(sum((v - mean) ** 2 for v in values) / 7) + EPS
    assert replies(main)[0] == pytest.approx([0.416666667 / denom, 0.125 / denom, 0.0])
    assert replies(others)[0] == pytest.approx([0.25 / denom])


def test_a_group_without_signal_at_any_node_is_zero_variance_and_dropped_when_asked() -> None:
    # the root pool is flat (0.5, 0.5) and each deeper node has one reply: nothing anywhere to compare
    flat = [
        rollout(0.5, ("size_up", 0.5), ("hazard", 0.25)),
        rollout(0.5, ("size_up", 0.5), ("patient", 0.25)),
    ]
    (kept,) = per_reply([flat], scale="group")
    assert (kept.zero_variance, kept.kept) == (True, True)
    assert replies(kept) == [[0.0, 0.0], [0.0, 0.0]]
    (dropped,) = per_reply([flat], scale="group", drop_zero_variance=True)
    assert dropped.kept is False
    # flat at the root but spread at a deeper node: signal, so kept even when flat groups are dropped
    deeper = [
        rollout(0.5, ("size_up", 0.5), ("hazard", 0.5)),
        rollout(0.5, ("size_up", 0.5), ("hazard", 0.0)),
    ]
    (scored,) = per_reply([deeper], scale="group", drop_zero_variance=True)
    first = scored.rollouts_G[0].reply_advantages
    assert scored.kept and first is not None and first[0] == 0.0 and first[1] > 0
    errored = [rollout(math.nan, error="x"), rollout(math.nan, error="y")]
    (none_healthy,) = per_reply([errored], scale="group")
    assert none_healthy.kept is False


def test_nodes_are_pooled_within_a_group_only() -> None:
    # the same node in two groups (two scenarios) is two pools: each group has one hazard reply, alone in it
    a = [rollout(1.0, ("size_up", 1.0), ("hazard", 0.5)), rollout(0.0, ("size_up", 0.0))]
    b = [rollout(1.0, ("size_up", 1.0), ("hazard", 0.0)), rollout(0.0, ("size_up", 0.0))]
    scored_a, scored_b = per_reply([a, b], scale="group")
    hazard_a, hazard_b = replies(scored_a)[0], replies(scored_b)[0]
    assert hazard_a is not None and hazard_b is not None and hazard_a[1] == 0.0 and hazard_b[1] == 0.0


def test_per_node_metrics() -> None:
    rollouts = group()
    (scored,) = per_reply([rollouts], scale="none")
    metrics = reply_credit_metrics(
        [ScoredRollout.from_rollout(r, c) for r, c in zip(rollouts, scored.rollouts_G, strict=True)]
    )
    assert metrics["credit/size_up/replies"] == 3.0
    assert metrics["credit/size_up/reward_to_go"] == pytest.approx(1.75 / 3)
    assert metrics["credit/hazard/advantage_abs"] == pytest.approx(0.125)
    assert metrics["credit/patient/zero_frac"] == 1.0 and metrics["credit/hazard/zero_frac"] == 0.0
    (alone,) = episode([[rollout(1.0)]], scale="none")
    by_episode = ScoredRollout.from_rollout(rollout(1.0), alone.rollouts_G[0])
    assert reply_credit_metrics([by_episode]) == {}  # episode credit: nothing per node
