"""What an evaluation reports: the summary of scored rollouts (the mean reward with its 95% interval clustered
by scenario, ``rubrics.intervals``; pass rates per requirement, diversity), as a table and as a plot."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.rollout import ScoredRollout
from rubrics.intervals import clustered_mean_ci
from rubrics.types import StopReason


@dataclass
class EvalSummary:
    """What an evaluation measured."""

    rollouts: int = 0
    """Rollouts run."""
    examples: int = 0
    """Distinct examples (scenarios)."""
    errored: int = 0
    """Rollouts marked with an error (left out of the reward statistics)."""
    reward_mean: float = math.nan
    """Mean reward over healthy rollouts."""
    reward_ci95: float = math.nan
    """Half-width of the 95% interval of the mean, clustered by scenario (``rubrics.intervals``); NaN with
    fewer than two scenarios."""
    reward_std: float = math.nan
    """Standard deviation of the reward."""
    pass_rates: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per requirement: (judged correct, judged) over all rollouts."""
    depth: dict[int, int] = field(default_factory=dict)
    """Histogram of the depth reached."""
    stop_reasons: dict[str, int] = field(default_factory=dict)
    """How rollouts ended."""
    completion_tokens: int = 0
    """Tokens the model generated."""
    wall_s: float = 0.0
    """Wall time of the whole evaluation."""
    distinct_fraction: float = math.nan
    """Distinct first replies over rollouts (1.0 = all different): a collapse detector."""

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of wall time."""
        return self.completion_tokens / self.wall_s if self.wall_s > 0 else math.nan

    def as_dict(self) -> dict[str, Any]:
        """Plain data (JSON)."""
        return {
            "rollouts": self.rollouts,
            "examples": self.examples,
            "errored": self.errored,
            "reward_mean": self.reward_mean,
            "reward_ci95": self.reward_ci95,
            "reward_std": self.reward_std,
            "pass_rates": {k: {"passed": p, "judged": j} for k, (p, j) in self.pass_rates.items()},
            "depth": self.depth,
            "stop_reasons": self.stop_reasons,
            "completion_tokens": self.completion_tokens,
            "wall_s": self.wall_s,
            "tokens_per_s": self.tokens_per_s,
            "distinct_fraction": self.distinct_fraction,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvalSummary:
        """Back from ``as_dict`` (``tokens_per_s`` is computed, not read).

        Raises:
            KeyError: a field is missing (named).
            ValueError: a field's value has the wrong form."""
        missing = [name for name in cls.__dataclass_fields__ if name not in data]
        if missing:
            raise KeyError(missing[0])
        return cls(
            rollouts=int(data["rollouts"]),
            examples=int(data["examples"]),
            errored=int(data["errored"]),
            reward_mean=float(data["reward_mean"]),
            reward_ci95=float(data["reward_ci95"]),
            reward_std=float(data["reward_std"]),
            pass_rates={k: (int(v["passed"]), int(v["judged"])) for k, v in data["pass_rates"].items()},
            depth={int(k): int(v) for k, v in data["depth"].items()},
            stop_reasons={str(k): int(v) for k, v in data["stop_reasons"].items()},
            completion_tokens=int(data["completion_tokens"]),
            wall_s=float(data["wall_s"]),
            distinct_fraction=float(data["distinct_fraction"]),
        )


def summarize(rollouts: Sequence[ScoredRollout], wall_s: float, examples: int) -> EvalSummary:
    """Statistics over scored rollouts."""
    healthy = [r for r in rollouts if r.healthy]
    rewards = [float(r.reward) for r in healthy]
    summary = EvalSummary(
        rollouts=len(rollouts), examples=examples, errored=len(rollouts) - len(healthy), wall_s=wall_s
    )
    if rewards:
        mean, summary.reward_ci95 = clustered_mean_ci(rewards, [r.scenario for r in healthy])
        var = math.fsum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1) if len(rewards) > 1 else 0.0
        summary.reward_mean, summary.reward_std = mean, math.sqrt(var)
    passes: dict[str, list[int]] = {}
    depth: Counter[int] = Counter()
    stops: Counter[str] = Counter()
    firsts = []
    for rollout in rollouts:
        for r in rollout.multistep.results if rollout.multistep is not None else []:
            entry = passes.setdefault(r.name, [0, 0])
            entry[0] += int(r.correct)
            entry[1] += 1
        depth[int(rollout.metrics.get("depth", 0))] += 1
        stops[rollout.stop_reason or ("error" if rollout.error else StopReason.COMPLETED.value)] += 1
        summary.completion_tokens += rollout.completion_tokens
        completion = rollout.completion or []
        firsts.append(
            completion[0]["content"] if isinstance(completion, list) and completion else str(completion)
        )
    summary.pass_rates = {k: (v[0], v[1]) for k, v in sorted(passes.items())}
    summary.depth = dict(sorted(depth.items()))
    summary.stop_reasons = dict(stops.most_common())
    summary.distinct_fraction = len(set(firsts)) / len(firsts) if firsts else math.nan
    return summary


def format_summary(summary: EvalSummary) -> str:
    """The summary as a plain-text table."""
    lines = [
        f"rollouts {summary.rollouts} over {summary.examples} examples ({summary.errored} errored)",
        f"reward   {summary.reward_mean:.3f} ± {summary.reward_ci95:.3f} (95% CI, clustered by scenario), "
        f"std {summary.reward_std:.3f}",
        f"tokens   {summary.completion_tokens} in {summary.wall_s:.1f} s = "
        f"{summary.tokens_per_s:.1f} tokens/s",
        f"distinct first replies {summary.distinct_fraction:.2f}",
        "depth    " + ", ".join(f"{d}: {c}" for d, c in summary.depth.items()),
        "stops    " + ", ".join(f"{k}: {v}" for k, v in summary.stop_reasons.items()),
    ]
    if summary.pass_rates:
        width = max(len(k) for k in summary.pass_rates)
        lines.append("requirement pass rates (passed / judged):")
        for name, (passed, judged) in summary.pass_rates.items():
            lines.append(f"  {name:<{width}}  {passed:>4} / {judged:<4} {passed / judged:6.1%}")
    return "\n".join(lines)


def plot_summary(summary: EvalSummary, rollouts: Sequence[ScoredRollout], path: str | Path) -> Path:
    """A PNG with the depth and reward distributions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rewards = [float(r.reward) for r in rollouts if math.isfinite(r.reward)]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.bar([str(d) for d in summary.depth], list(summary.depth.values()), color="#2166ac")
    ax1.set(title="depth reached", xlabel="levels", ylabel="rollouts")
    ax2.hist(
        rewards, bins=20, range=(min(0.0, *rewards), max(1.0, *rewards)) if rewards else None, color="#1b7837"
    )
    ax2.axvline(summary.reward_mean, color="black", linestyle="--", label=f"mean {summary.reward_mean:.3f}")
    ax2.set(title="reward", xlabel="reward", ylabel="rollouts")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)
