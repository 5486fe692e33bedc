"""Group-relative advantages: reward minus the group's baseline, optionally scaled by a std.

Plain Python (no torch): the scoring workers compute a group's advantages as soon as the group is complete.

Conventions, chosen to match TRL 1.16's ``GRPOTrainer`` (``_generate_and_score_completions``):

- baseline: the mean of the group's non-errored rewards. Errored rollouts (a reward function raised, a judge
  gave no verdict) are left out of the mean and the std and get advantage 0.0, so they carry no gradient.
  TRL does the same with NaN rewards (``nanmean``/``nanstd``, then ``nan_to_num``); here a reward that is
  NaN or infinite counts as errored too, so no NaN can reach the loss (``healthy`` then counts it out).
- std: the *sample* std (Bessel's correction, divide by n - 1), as ``torch.std`` and TRL's ``nanstd``.
  With fewer than two healthy rollouts there is no std; the group has no signal and every advantage is 0.0.
- scaling: ``(reward - mean) / (std + eps)`` with ``eps = 1e-4`` (TRL adds 1e-4 to the std, it does not clamp).
- zero variance: a std of at most ``ZERO_STD_ATOL`` (TRL logs ``torch.isclose(std, 0)``, atol 1e-8).
- ``batch``: TRL still subtracts the *group* mean but divides by the sample std of every (healthy) reward of
  the generation batch (all processes, all groups): ``(r - mean_group) / (std_batch + eps)``. ``batch_scale``
  does exactly that over the groups it is given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

ZERO_STD_ATOL = 1e-8
"""A group whose reward std is at most this has zero variance (TRL: ``torch.isclose(std, 0)``)."""


@dataclass(frozen=True)
class GroupAdvantages:
    """The advantages of one group of G rollouts of the same example."""

    advantages: list[float]
    """[G] one advantage per rollout; 0.0 for errored rollouts and for groups without signal."""
    zero_variance: bool
    """The healthy rewards are all equal (or fewer than two): the group carries no learning signal."""
    healthy: int
    """Rollouts that were scored without error (the ones in the baseline)."""
    mean: float
    """Mean of the healthy rewards (0.0 when there are none)."""
    std: float
    """Sample std of the healthy rewards (0.0 with fewer than two)."""


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs) if xs else 0.0


def sample_std(xs: Sequence[float]) -> float:
    """Std with Bessel's correction (n - 1), as ``torch.std``; 0.0 with fewer than two values."""
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _healthy(rewards_G: Sequence[float], errored_G: Sequence[bool]) -> list[float]:
    if len(rewards_G) != len(errored_G):
        raise ValueError(f"rewards ({len(rewards_G)}) and errored flags ({len(errored_G)}) differ in length")
    return [r for r, bad in zip(rewards_G, errored_G, strict=True) if not _is_errored(r, bad)]


def _is_errored(reward: float, errored: bool) -> bool:
    """Flagged errored, or a reward that is not a finite number (TRL: a NaN reward is unscorable)."""
    return errored or not math.isfinite(reward)


def group_advantages(
    rewards_G: Sequence[float],
    errored_G: Sequence[bool],
    scale: Literal["group", "none"] = "group",
    eps: float = 1e-4,
) -> GroupAdvantages:
    """Advantages of one group: ``r - mean`` (``scale="none"``) or ``(r - mean) / (std + eps)`` (``"group"``).

    Mean and std are over the non-errored rollouts only; errored rollouts get 0.0. A group with zero variance
    (or fewer than two healthy rollouts) gets all zeros and ``zero_variance=True``.
    """
    healthy = _healthy(rewards_G, errored_G)
    mean, std = _mean(healthy), sample_std(healthy)
    zero_variance = len(healthy) < 2 or std <= ZERO_STD_ATOL
    if zero_variance:
        return GroupAdvantages([0.0] * len(rewards_G), True, len(healthy), mean, std)
    denom = std + eps if scale == "group" else 1.0
    advantages = [
        0.0 if _is_errored(r, bad) else (r - mean) / denom
        for r, bad in zip(rewards_G, errored_G, strict=True)
    ]
    return GroupAdvantages(advantages, False, len(healthy), mean, std)


def batch_scale(
    rewards_NG: Sequence[Sequence[float]],
    errored_NG: Sequence[Sequence[bool]],
    eps: float = 1e-4,
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
        g = group_advantages(rewards_G, errored_G, scale="none", eps=eps)
        out.append(
            GroupAdvantages([a / denom for a in g.advantages], g.zero_variance, g.healthy, g.mean, g.std)
        )
    return out


def step_advantages(
    rewards_NG: Sequence[Sequence[float]],
    errored_NG: Sequence[Sequence[bool]],
    scale: Literal["group", "batch", "none"],
    eps: float = 1e-4,
) -> list[GroupAdvantages]:
    """Advantages of all N groups of a step under ``AdvantageConfig.scale_rewards`` (the one dispatch)."""
    if scale == "batch":
        return batch_scale(rewards_NG, errored_NG, eps)
    return [group_advantages(rs, es, scale, eps) for rs, es in zip(rewards_NG, errored_NG, strict=True)]
