"""Group-relative advantages: reward minus the group's baseline, optionally scaled by a std. The one
place they are computed, as pure functions of the rewards: ``episode_credit`` (``group_advantages`` per
group), called by held-out evaluation (scale ``"none"``, group by group) and by the trainer's orchestrator (a
whole step, ``AdvantageConfig.scale_rewards``), and ``Rubric.score_group`` for hand-built states; the
credit they return (``GroupCredit``, one ``RolloutCredit`` per rollout) is what the training batch reads.

Plain Python (no torch): a group's advantages are computed as soon as the step's groups are scored.

Conventions, chosen to match TRL 1.16's ``GRPOTrainer`` (``_generate_and_score_completions``):

- baseline: the mean of the group's non-errored rewards. Errored rollouts (a reward function raised, a judge
  gave no verdict) are left out of the mean and the std and get advantage 0.0, so they carry no gradient.
  TRL does the same with NaN rewards (``nanmean``/``nanstd``, then ``nan_to_num``); here a reward that is
  NaN or infinite counts as errored too, so no NaN can reach the loss.
- std: the *sample* std (Bessel's correction, divide by n - 1), as ``torch.std`` and TRL's ``nanstd``.
- ``group``: ``(reward - mean) / (std + eps)`` with ``eps = 1e-4`` (TRL adds 1e-4 to the std, it does not
  clamp). A group with zero variance (a std of at most ``ZERO_STD_ATOL``, TRL logs ``torch.isclose(std, 0)``
  with atol 1e-8) or fewer than two healthy rollouts has no signal: every advantage is 0.0.
- ``batch``: TRL still subtracts the *group* mean but divides by the sample std of every healthy reward of
  the generation batch (all groups): ``(r - mean_group) / (std_batch + eps)``; zero-variance groups get 0.0.
- ``none``: ``reward - mean``, ``Rubric.score_group``'s advantage; nothing is zeroed.
- mean: one function for every path (``mean``), taken around the first healthy reward, so equal rewards
  give a mean equal to each of them and an advantage of exactly 0.0 with no tolerance.

Credit per reply (``reply_credit_per_node``, ``advantage.credit: turn``; ``docs/training.md`` has the
formula): each model reply of a multi-turn rollout gets its own advantage, its reward-to-go normalised among
the group's replies that answered the same requirement node, under the same conventions: the node's replies
play the part of the group's rollouts. ``mixed_credit`` (``advantage.credit: mixed``) adds that per-node
term, weighted, to the episode advantage, as GiGPO does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Scale = Literal["group", "batch", "none"]
"""What (reward - group mean) is divided by: the group's std, the step's std, or nothing."""

ZERO_STD_ATOL = 1e-8
"""A group whose reward std is at most this has zero variance (TRL: ``torch.isclose(std, 0)``)."""

EPS = 1e-4
"""Added to the std before dividing (TRL's constant)."""


@dataclass(frozen=True)
class GroupAdvantages:
    """The advantages of one group of G rollouts of the same example."""

    advantages_G: list[float]
    """[G] one advantage per rollout; 0.0 for errored rollouts (and, when scaled, for groups without
    signal)."""
    zero_variance: bool
    """The healthy rewards have a std of at most ``ZERO_STD_ATOL`` (or there are fewer than two): no
    signal."""
    healthy: int
    """Rollouts that were scored without error (the ones in the baseline)."""
    mean: float
    """The baseline subtracted: mean of the healthy rewards (0.0 when there are none)."""
    std: float
    """Sample std of the healthy rewards (0.0 with fewer than two)."""


def mean(xs: Sequence[float]) -> float:
    """The mean computed around the first value, ``x0 + fsum(x - x0) / n``: exactly ``x0`` when every value is
    ``x0`` (0.0 for no values). The baseline of every advantage and the centre of ``sample_std``."""
    return xs[0] + math.fsum(x - xs[0] for x in xs) / len(xs) if xs else 0.0


def sample_std(xs: Sequence[float]) -> float:
    """Std with Bessel's correction (n - 1) around ``mean``, as ``torch.std``; 0.0 with fewer than two."""
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def is_errored(reward: float, errored: bool) -> bool:
    """Flagged errored, or a reward that is not a finite number (TRL: a NaN reward is unscorable)."""
    return errored or not math.isfinite(reward)


def _healthy(rewards_G: Sequence[float], errored_G: Sequence[bool]) -> list[float]:
    if len(rewards_G) != len(errored_G):
        raise ValueError(f"rewards ({len(rewards_G)}) and errored flags ({len(errored_G)}) differ in length")
    return [r for r, bad in zip(rewards_G, errored_G, strict=True) if not is_errored(r, bad)]


def _scaled(
    rewards_G: Sequence[float], errored_G: Sequence[bool], group_scale: bool, eps: float
) -> GroupAdvantages:
    """``(r - mean) / (std + eps)`` (``group_scale``) or ``r - mean``; zeros without signal."""
    healthy = _healthy(rewards_G, errored_G)
    baseline, std = mean(healthy), sample_std(healthy)
    if len(healthy) < 2 or std <= ZERO_STD_ATOL:
        return GroupAdvantages([0.0] * len(rewards_G), True, len(healthy), baseline, std)
    denom = std + eps if group_scale else 1.0
    advantages_G = [
        0.0 if is_errored(r, bad) else (r - baseline) / denom
        for r, bad in zip(rewards_G, errored_G, strict=True)
    ]
    return GroupAdvantages(advantages_G, False, len(healthy), baseline, std)


def group_advantages(
    rewards_G: Sequence[float],
    errored_G: Sequence[bool],
    scale: Literal["group", "none"] = "group",
    eps: float = EPS,
) -> GroupAdvantages:
    """Advantages of one group: ``r - mean`` (``scale="none"``) or ``(r - mean) / (std + eps)`` (``"group"``).

    Mean and std are over the non-errored rollouts only; errored rollouts get 0.0. Under ``"group"`` a group
    with zero variance gets all zeros; under ``"none"`` its advantages are at most its tiny spread (exactly
    0.0 for equal rewards). ``zero_variance`` is flagged the same way under both.
    """
    if scale == "group":
        return _scaled(rewards_G, errored_G, group_scale=True, eps=eps)
    healthy = _healthy(rewards_G, errored_G)
    baseline, std = mean(healthy), sample_std(healthy)
    advantages_G = [
        0.0 if is_errored(r, bad) else r - baseline for r, bad in zip(rewards_G, errored_G, strict=True)
    ]
    zero_variance = len(healthy) < 2 or std <= ZERO_STD_ATOL
    return GroupAdvantages(advantages_G, zero_variance, len(healthy), baseline, std)


def batch_scale(
    rewards_NG: Sequence[Sequence[float]],
    errored_NG: Sequence[Sequence[bool]],
    eps: float = EPS,
) -> list[GroupAdvantages]:
    """``scale_rewards="batch"`` over the N groups of one step: ``(r - group mean) / (batch std + eps)``.

    The batch std is the sample std of every healthy reward of the N groups (TRL: ``nanstd`` over the whole
    gathered generation batch). Pass every group of the step, dropped ones included, to match TRL. Zero
    variance stays a property of each group (TRL's logged flag under "batch" is the batch std's instead).
    """
    healthy_all = [r for rs, es in zip(rewards_NG, errored_NG, strict=True) for r in _healthy(rs, es)]
    denom = sample_std(healthy_all) + eps
    out = []
    for rewards_G, errored_G in zip(rewards_NG, errored_NG, strict=True):
        g = _scaled(rewards_G, errored_G, group_scale=False, eps=eps)
        out.append(
            GroupAdvantages([a / denom for a in g.advantages_G], g.zero_variance, g.healthy, g.mean, g.std)
        )
    return out


def step_advantages(
    rewards_NG: Sequence[Sequence[float]],
    errored_NG: Sequence[Sequence[bool]],
    scale: Scale,
    eps: float = EPS,
) -> list[GroupAdvantages]:
    """Advantages of all N groups of a step under ``scale`` (``AdvantageConfig.scale_rewards``)."""
    if scale == "batch":
        return batch_scale(rewards_NG, errored_NG, eps)
    return [group_advantages(rs, es, scale, eps) for rs, es in zip(rewards_NG, errored_NG, strict=True)]


@dataclass(frozen=True)
class ReplyCredit:
    """What one model reply of a multi-turn rollout earned (``Environment.reply_credit``)."""

    node: str
    """The anchor state: the requirement node(s) the reply answered (the walk's frontier when it was made).
    Replies of one group with the same node are each other's baseline."""
    reward_to_go: float
    """The reward strategy applied to the verdicts of this reply and of every later one (the first reply's is
    the rollout's reward)."""


@dataclass(frozen=True)
class RolloutCredit:
    """What one rollout trains on: its advantage, and with credit per reply each reply's own."""

    advantage: float
    """Reward minus its group's baseline, scaled as asked (the first reply's advantage under credit per
    reply); 0.0 for an errored rollout."""
    reply_credit: list[ReplyCredit] | None = None
    """Credit per reply: the node and reward-to-go of each model reply (empty for an errored rollout); None
    under episode credit."""
    reply_advantages: list[float] | None = None
    """Credit per reply: each model reply's own advantage, put on that reply's tokens; None under episode
    credit."""


@dataclass(frozen=True)
class GroupCredit:
    """The credit of one group of G rollouts, and whether the group is trained on."""

    rollouts_G: list[RolloutCredit]
    """[G] in the group's order."""
    zero_variance: bool
    """No signal: the healthy rewards are (nearly) all equal, or fewer than two (per reply: no node's pool
    has signal)."""
    kept: bool
    """Trained on; False when no rollout is healthy, or it has zero variance and such groups are dropped."""


def episode_credit(
    rewards_NG: Sequence[Sequence[float]],
    errored_NG: Sequence[Sequence[bool]],
    scale: Scale = "none",
    drop_zero_variance: bool = False,
    eps: float = EPS,
) -> list[GroupCredit]:
    """Each rollout's advantage under ``scale``, the N groups taken together (``step_advantages``). A group
    is not kept when no rollout is healthy, or when it has zero variance and ``drop_zero_variance``."""
    out = []
    for result in step_advantages(rewards_NG, errored_NG, scale, eps):
        dropped = result.healthy == 0 or (result.zero_variance and drop_zero_variance)
        credits_G = [RolloutCredit(a) for a in result.advantages_G]
        out.append(GroupCredit(credits_G, zero_variance=result.zero_variance, kept=not dropped))
    return out


def reply_credit_per_node(
    rewards_NG: Sequence[Sequence[float]],
    errored_NG: Sequence[Sequence[bool]],
    credits_NG: Sequence[Sequence[Sequence[ReplyCredit]]],
    scale: Scale = "group",
    drop_zero_variance: bool = False,
    eps: float = EPS,
) -> list[GroupCredit]:
    """Credit per reply: each model reply's advantage, from ``credits_NG`` (the node and reward-to-go of every
    reply of every rollout; ignored for an errored rollout, which gets no reply credit); the rollout's
    advantage is its first reply's.

    Within a group, the replies with the same ``node`` form a pool; each pool is normalised exactly as
    ``step_advantages`` normalises a group under ``scale`` (``batch``: the std of every healthy reply's
    reward-to-go in the step). A reply alone at its node, or in a pool with zero variance, gets 0.0: it has no
    baseline. Errored rollouts get 0.0 for every reply and join no pool. The first replies of a group all
    answer the root and their reward-to-go is the reward, so under ``group`` and ``none`` the rollout's
    advantage equals the episode advantage. A group is ``zero_variance`` when no pool of it has signal; it is
    not kept when no rollout is healthy, or when it has zero variance and ``drop_zero_variance``."""
    pools: list[tuple[int, list[tuple[int, int]], list[float]]] = []  # (group, [(rollout, reply)], values)
    kept_credits_NG: list[list[list[ReplyCredit]]] = []
    healthy_N = []
    for g, (rewards_G, errored_G, credits_G) in enumerate(
        zip(rewards_NG, errored_NG, credits_NG, strict=True)
    ):
        by_node: dict[str, tuple[list[tuple[int, int]], list[float]]] = {}
        healthy_G = [not is_errored(r, e) for r, e in zip(rewards_G, errored_G, strict=True)]
        kept_G = [list(c) if ok else [] for ok, c in zip(healthy_G, credits_G, strict=True)]
        for i, credits in enumerate(kept_G):
            for k, c in enumerate(credits):
                members, values = by_node.setdefault(c.node, ([], []))
                members.append((i, k))
                values.append(c.reward_to_go)
        pools += [(g, members, values) for members, values in by_node.values()]
        healthy_N.append(sum(healthy_G))
        kept_credits_NG.append(kept_G)
    results = step_advantages([v for _, _, v in pools], [[False] * len(v) for _, _, v in pools], scale, eps)
    replies_NG = [[[0.0] * len(c) for c in credits_G] for credits_G in kept_credits_NG]
    signal_N = [False] * len(kept_credits_NG)
    for (g, members, _), result in zip(pools, results, strict=True):
        signal_N[g] = signal_N[g] or not result.zero_variance
        for (i, k), advantage in zip(members, result.advantages_G, strict=True):
            replies_NG[g][i][k] = advantage
    out = []
    for g, (credits_G, replies_G) in enumerate(zip(kept_credits_NG, replies_NG, strict=True)):
        rollouts_G = [
            RolloutCredit(replies[0] if replies else 0.0, credits, replies)
            for credits, replies in zip(credits_G, replies_G, strict=True)
        ]
        zero_variance = not signal_N[g]
        dropped = healthy_N[g] == 0 or (zero_variance and drop_zero_variance)
        out.append(GroupCredit(rollouts_G, zero_variance=zero_variance, kept=not dropped))
    return out


def mixed_credit(
    rewards_NG: Sequence[Sequence[float]],
    errored_NG: Sequence[Sequence[bool]],
    credits_NG: Sequence[Sequence[Sequence[ReplyCredit]]],
    node_weight: float,
    scale: Scale = "group",
    drop_zero_variance: bool = False,
    eps: float = EPS,
) -> list[GroupCredit]:
    """Episode plus per-node credit (GiGPO's sum): reply k of rollout i gets
    ``A_episode(i) + node_weight * A_node(i, k)``, with ``A_episode`` from ``episode_credit`` and ``A_node``
    from ``reply_credit_per_node``, both under ``scale``. A reply alone at its node (``A_node`` 0.0) keeps
    the episode advantage, so no reply loses its gradient; an errored rollout still gets 0.0. The rollout's
    advantage is the episode advantage; the groups kept are those of ``reply_credit_per_node`` (the root's
    pool is the episode group, so a group with episode signal is never dropped)."""
    episode_N = episode_credit(rewards_NG, errored_NG, scale, False, eps)
    per_node_N = reply_credit_per_node(rewards_NG, errored_NG, credits_NG, scale, drop_zero_variance, eps)
    out = []
    for episode, per_node in zip(episode_N, per_node_N, strict=True):
        rollouts_G = [
            RolloutCredit(
                e.advantage,
                n.reply_credit,
                [e.advantage + node_weight * a for a in n.reply_advantages or []],
            )
            for e, n in zip(episode.rollouts_G, per_node.rollouts_G, strict=True)
        ]
        out.append(GroupCredit(rollouts_G, zero_variance=per_node.zero_variance, kept=per_node.kept))
    return out
