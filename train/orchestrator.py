"""The orchestrator: examples in, scored groups with advantages out.

It walks the training examples in a seeded order (the data cursor: epoch and position, saved in
checkpoints), asks the environment for G rollouts of each example through the backend, and lets each group
be scored as soon as its own rollouts finish (scoring overlaps the generation of the other groups; judges
are async). When a group is complete its advantages are computed (``train.advantages``). Sampling of step
``k`` is seeded from ``(seed, k)``, so a resumed run regenerates exactly what the uninterrupted one would.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from envs.backends.base import InferenceBackend
from envs.environment import Environment
from rubrics.types import State
from train.advantages import step_advantages
from train.config import AdvantageConfig


@dataclass
class StepRollouts:
    """Everything generated and scored for one optimiser step."""

    groups: list[list[State]]
    """Scored rollouts, one list per example (only the groups kept for training)."""
    advantages: list[list[float]]
    """One advantage per rollout of each kept group."""
    all_states: list[State]
    """Every rollout of the step, kept or dropped (for metrics)."""
    zero_variance_groups: int
    """Groups whose rewards were all equal."""
    dropped_groups: int
    """Groups left out of the loss (zero variance, or no healthy rollout)."""
    generate_s: float
    """Wall time of generation and scoring together (they overlap)."""
    policy_version: int
    """The optimiser step whose weights generated these rollouts."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else worth logging."""


class DataCursor:
    """A seeded, resumable walk over example indices: a fresh shuffle every epoch."""

    def __init__(self, n: int, seed: int, epoch: int = 0, position: int = 0) -> None:
        if n < 1:
            raise ValueError("no training examples")
        self.n, self.seed, self.epoch, self.position = n, seed, epoch, position
        self._order = self._shuffle(epoch)

    def _shuffle(self, epoch: int) -> list[int]:
        order = list(range(self.n))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def take(self, k: int) -> list[int]:
        """The next ``k`` example indices."""
        out = []
        for _ in range(k):
            if self.position >= self.n:
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._shuffle(self.epoch)
            out.append(self._order[self.position])
            self.position += 1
        return out

    def state(self) -> dict[str, int]:
        """What a checkpoint needs to resume the walk."""
        return {"epoch": self.epoch, "position": self.position}


class Orchestrator:
    """Produces one ``StepRollouts`` per optimiser step."""

    def __init__(
        self,
        env: Environment,
        backend: InferenceBackend,
        examples: Sequence[dict[str, Any]],
        prompts_per_step: int,
        group_size: int,
        advantage: AdvantageConfig,
        seed: int,
        cursor: dict[str, int] | None = None,
    ) -> None:
        self.env, self.backend, self.examples = env, backend, list(examples)
        self.prompts_per_step, self.group_size, self.advantage, self.seed = (
            prompts_per_step,
            group_size,
            advantage,
            seed,
        )
        self.cursor = DataCursor(len(self.examples), seed, **(cursor or {}))

    def produce(self, step: int, policy_version: int) -> Coroutine[Any, Any, StepRollouts]:
        """Take the examples of ``step`` from the cursor now, in the caller's thread (so ``cursor.state()``
        right after this call is the cursor a checkpoint of ``step`` must hold), and return the coroutine that
        generates and scores their groups (it may run later, in the rollout loop's thread)."""
        indices = self.cursor.take(self.prompts_per_step)
        return self._produce(step, indices, policy_version)

    async def _produce(self, step: int, indices: list[int], policy_version: int) -> StepRollouts:
        import torch

        torch.manual_seed(self.seed * 1_000_003 + step)  # sampling of this step depends on (seed, step) only
        start = time.perf_counter()
        groups = await asyncio.gather(
            *(self.env.run_group(self.examples[i], self.backend, self.group_size) for i in indices)
        )
        elapsed = time.perf_counter() - start
        rewards = [[float(s.get("reward", float("nan"))) for s in g] for g in groups]
        errored = [[bool(s.get("error")) for s in g] for g in groups]
        kept, kept_advs, zero_var, dropped = [], [], 0, 0
        for group, result in zip(
            groups, step_advantages(rewards, errored, self.advantage.scale_rewards), strict=True
        ):
            zero_var += int(result.zero_variance)
            if result.healthy == 0 or (result.zero_variance and self.advantage.drop_zero_variance_groups):
                dropped += 1
                continue
            kept.append(list(group))
            kept_advs.append(list(result.advantages))
        return StepRollouts(
            groups=kept,
            advantages=kept_advs,
            all_states=[s for g in groups for s in g],
            zero_variance_groups=zero_var,
            dropped_groups=dropped,
            generate_s=elapsed,
            policy_version=policy_version,
        )
