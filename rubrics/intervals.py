"""The one interval of a mean reward: a 95% t-interval clustered by scenario (or by prompt).

Every ± given beside a reward comes from ``clustered_mean_ci``: an evaluation's ``summary.json`` and the
table ``rubric-grpo eval`` prints (``envs.evaluation.summary``), ``report.md`` and ``report.png`` (which
draw the logged ``eval/reward_ci95``), the rubric probe's table, the criteria scores per tag, and the paired
changes of ``report.md`` (``rubrics.multistep.probe.paired_difference``: one difference per scenario, each
its own cluster, where the clustered interval is the ordinary paired t-interval). Rollouts of one scenario
are not independent: a scenario played 8 times is one piece of evidence with some noise, not 8, so the
rollouts of one cluster (``cluster_of``) count together.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

# two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (beyond: the normal 1.96)
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)  # fmt: skip


def t95(dof: int) -> float:
    """The two-sided 95% quantile of Student's t with ``dof`` degrees of freedom."""
    if dof < 1:
        return math.nan
    return _T95[dof - 1] if dof <= len(_T95) else 1.96


def clustered_mean_ci(values: Sequence[float], clusters: Sequence[str]) -> tuple[float, float]:
    """The mean of ``values`` and the half-width of its 95% interval, clustered by ``clusters``.

    The cluster-robust standard error of a mean, ``sqrt(G / (G - 1) * sum_g (sum_{i in g} (y_i - mean))^2)
    / N`` over G clusters and N values, with Student's t on G - 1 degrees of freedom. NaN half-width with
    fewer than two clusters."""
    if not values:
        return math.nan, math.nan
    mean = math.fsum(values) / len(values)
    residuals: dict[str, float] = defaultdict(float)
    for value, cluster in zip(values, clusters, strict=True):
        residuals[cluster] += value - mean
    groups = len(residuals)
    if groups < 2:
        return mean, math.nan
    variance = groups / (groups - 1) * math.fsum(r * r for r in residuals.values()) / len(values) ** 2
    return mean, t95(groups - 1) * math.sqrt(variance)


def cluster_of(state: Mapping[str, Any]) -> str:
    """The cluster of a rollout (a state, or a line of ``rollouts.jsonl``): the name of the scenario it
    played (``info["scenario"]``), or, for an example without one, its prompt."""
    info = state.get("info") or {}
    scenario = info.get("scenario") if isinstance(info, Mapping) else None
    return str(scenario) if scenario else str(state.get("prompt", ""))
