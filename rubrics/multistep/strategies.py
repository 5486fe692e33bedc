"""Reward strategies: turn a walk's verdicts into one number.

Each strategy is a function ``f(results, ideal) -> float`` of the judged requirements (``results``) and of
the best walk the scenario allows (``ideal``: every requirement on its ground-truth path judged correct).
Write ``s_r`` = 1 when requirement r was judged correct, else 0, and ``l_r`` its integer level (roots 0).
The **normalised** form divides by the same strategy applied to the ideal walk, so it lies in [0, 1]
(1.0 = the whole ground-truth path satisfied); it is the default for training. When the ideal scores 0
(an empty path) the normalised reward is 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import StrictBool

from rubrics.error_text import show
from rubrics.multistep.files import InFile
from rubrics.multistep.walk import RequirementResult

Results = Sequence[RequirementResult]


def sum_reward(results: Results, ideal: Results) -> float:
    """``sum_r s_r``: one point per requirement judged correct."""
    return float(sum(1 for r in results if r.correct))


def mean_reward(results: Results, ideal: Results) -> float:
    """``sum_r s_r / |judged|``: the fraction of judged requirements that were correct (0 if none judged)."""
    return sum_reward(results, ideal) / len(results) if results else 0.0


def level_weighted_reward(results: Results, ideal: Results, level_bonus: float = 0.5) -> float:
    """``sum_r s_r * (1 + level_bonus * l_r)``: deeper requirements are worth more, linearly."""
    return math.fsum(1.0 + level_bonus * r.level for r in results if r.correct)


def progressive_reward(results: Results, ideal: Results, growth: float = 1.5) -> float:
    """``sum_r s_r * growth ** l_r``: each level is worth ``growth`` times the one before."""
    return math.fsum(growth ** int(r.level) for r in results if r.correct)


def level_based_reward(results: Results, ideal: Results) -> float:
    """``max_r s_r * (l_r + 1)``: the number of levels reached (the depth)."""
    return float(max((int(r.level) + 1 for r in results if r.correct), default=0))


def completion_ratio_reward(results: Results, ideal: Results) -> float:
    """``sum_r s_r / |ideal|``: the share of the ground-truth path that was satisfied (0 if it is empty)."""
    return sum_reward(results, ideal) / len(ideal) if ideal else 0.0


STRATEGIES: dict[str, Callable[..., float]] = {
    "level_weighted": level_weighted_reward,
    "progressive": progressive_reward,
    "mean": mean_reward,
    "sum": sum_reward,
    "level_based": level_based_reward,
    "completion_ratio": completion_ratio_reward,
}
"""Strategy functions by their YAML ``type``."""

PARAMS: dict[str, dict[str, float]] = {"level_weighted": {"level_bonus": 0.5}, "progressive": {"growth": 1.5}}
"""Each strategy's tunable parameters and their defaults."""


@dataclass
class RewardStrategy:
    """A named strategy, its parameters and whether the reward is normalised."""

    type: Annotated[str, InFile(Literal[tuple(STRATEGIES)])]
    """One of ``STRATEGIES``."""
    normalized: StrictBool = True
    """Divide by the ideal walk's score (the default for training)."""
    params: Annotated[dict[str, float], InFile(None)] = field(default_factory=dict)
    """Overrides of the strategy's parameters (``PARAMS``: ``level_bonus``, ``growth``); a file writes each
    beside ``type``."""

    def __post_init__(self) -> None:
        if self.type not in STRATEGIES:
            raise ValueError(
                f"reward strategy: field 'type' must be one of {', '.join(STRATEGIES)}, got {self.type!r}"
            )
        allowed = PARAMS.get(self.type, {})
        for key, value in self.params.items():
            if key not in allowed:
                raise ValueError(
                    f"reward strategy {self.type!r} has no parameter {key!r} "
                    f"(allowed: {', '.join(allowed) or 'none'})"
                )
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not number or not math.isfinite(value) or value <= 0:
                raise ValueError(
                    f"reward strategy {self.type!r}: parameter {key!r} must be a positive number "
                    f"(got {show(value)})"
                )

    def raw(self, results: Results, ideal: Results) -> float:
        """The unnormalised score."""
        return STRATEGIES[self.type](results, ideal, **self.params)

    def __call__(self, results: Results, ideal: Results) -> float:
        """The reward: normalised by the ideal walk unless ``normalized`` is False."""
        raw = self.raw(results, ideal)
        if not self.normalized:
            return raw
        best = self.raw(ideal, ideal)
        return raw / best if best > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain data for YAML."""
        data: dict[str, Any] = {"type": self.type, "normalized": self.normalized}
        data.update(self.params)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | str) -> RewardStrategy:
        """From YAML: a name, or a mapping with ``type``, ``normalized`` and parameters."""
        if isinstance(data, str):
            return cls(type=data)
        if not isinstance(data, Mapping) or "type" not in data:
            raise ValueError("reward strategy: expected a name or a mapping with a 'type'")
        normalized = data.get("normalized", True)
        if not isinstance(normalized, bool):
            raise ValueError("reward strategy: field 'normalized' must be true or false")
        params = {k: v for k, v in data.items() if k not in ("type", "normalized")}
        return cls(type=str(data["type"]), normalized=normalized, params=params)
