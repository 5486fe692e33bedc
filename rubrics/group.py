"""``RubricGroup``: several rubrics scored together, rewards and same-named metrics summed.

Departures from the peers, on purpose: advantages are recomputed from the aggregated rewards (never a
child's stale per-rubric advantage), and ``timing["scoring_ms"]`` is the group's real wall time (children
run concurrently, so their times are not added up).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from typing import Any

from rubrics.rubric import RolloutScore, Rubric
from rubrics.types import RewardFunc

logger = logging.getLogger(__name__)


class RubricGroup(Rubric):
    """Aggregates child rubrics: the reward is the sum of the children's rewards."""

    def __init__(self, rubrics: Sequence[Rubric], **kwargs: Any) -> None:
        if not rubrics:
            raise ValueError("RubricGroup needs at least one rubric; got an empty list")
        for i, r in enumerate(rubrics):
            if not isinstance(r, Rubric):
                raise TypeError(f"RubricGroup: item {i} is {type(r).__name__}, not a Rubric")
        self.rubrics: list[Rubric] = list(rubrics)
        super().__init__(**kwargs)

    @property
    def funcs(self) -> list[RewardFunc]:
        """All children's functions, in order."""
        return [f for r in self.rubrics for f in r.funcs]

    @property
    def weights(self) -> list[float]:
        """All children's weights, in order."""
        return [w for r in self.rubrics for w in r.weights]

    def add_reward_func(self, func: RewardFunc, weight: float = 1.0) -> None:
        """Adds to the first rubric only (with a warning)."""
        if not hasattr(self, "rubrics"):  # during Rubric.__init__ with funcs=...
            raise ValueError("RubricGroup takes no funcs of its own; add them to a child rubric")
        logger.warning(
            "RubricGroup.add_reward_func adds %r to the first rubric only", getattr(func, "__name__", func)
        )
        self.rubrics[0].add_reward_func(func, weight)

    def add_metric(self, func: RewardFunc, weight: float = 0.0) -> None:
        """Adds to the first rubric only (with a warning)."""
        logger.warning(
            "RubricGroup.add_metric adds %r to the first rubric only", getattr(func, "__name__", func)
        )
        self.rubrics[0].add_metric(func, weight)

    def add_class_object(self, name: str, obj: Any) -> None:
        """Adds to the first rubric only (with a warning)."""
        if not hasattr(self, "rubrics") or (name == "parser" and obj is self.parser):
            super().add_class_object(name, obj)  # the group's own parser, set up by Rubric.__init__
            return
        logger.warning("RubricGroup.add_class_object adds %r to the first rubric only", name)
        self.rubrics[0].add_class_object(name, obj)

    def _get_reward_func_names(self) -> list[str]:
        return [n for r in self.rubrics for n in r._get_reward_func_names()]

    def _has_group_funcs(self) -> list[str]:
        return [n for r in self.rubrics for n in r._has_group_funcs()]

    def _asks_for_state(self) -> bool:
        return any(r._asks_for_state() for r in self.rubrics)

    def check_bindings(self) -> None:
        """Every child's bindings (a group scores nothing while one of its children cannot)."""
        for rubric in self.rubrics:
            rubric.check_bindings()

    async def _score_states(self, per_rollout: Sequence[dict[str, Any]], group: bool) -> list[RolloutScore]:
        self.check_bindings()
        per_child = await asyncio.gather(*(r._score_states(per_rollout, group) for r in self.rubrics))
        combined: list[RolloutScore] = []
        for i in range(len(per_rollout)):
            total = RolloutScore(reward=0.0)
            for child_scores in per_child:
                child = child_scores[i]
                total.reward += child.reward  # NaN (an errored child) stays NaN
                for name, value in child.values.items():
                    total.values[name] = total.values.get(name, 0.0) + value
                total.errors.extend(child.errors)
            if total.errors:
                total.reward = math.nan
            combined.append(total)
        return combined
