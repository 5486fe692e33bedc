"""The orchestrator: examples in, scored groups with advantages out.

It walks the training examples in a seeded order (the data cursor of ``rollout.sampler``, saved in
checkpoints), asks the environment for G rollouts of each example through the backend, and lets each group
be scored as soon as its own rollouts finish (scoring overlaps the generation of the other groups; judges
are async). When every group of the step is scored, their advantages are computed once from the rewards,
under the run's scale and credit (``rubrics.advantages.episode_credit``, ``reply_credit_per_node`` or
``mixed_credit``). Each finished ``Rollout`` then becomes a ``ScoredRollout`` (``envs.rollout``), once,
with its credit: what the batch, the metrics, the environment's ``step_metrics`` and the samples
read. With ``rollout.guide`` each group also holds its example's demonstration, replayed through the
environment and scored by the same rubric (``RolloutGroup.guides``): in the baseline and the batch, not in
the metrics.
Sampling of step
``k`` is seeded from ``(seed, k)``, so a resumed run regenerates exactly what the uninterrupted one would.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from envs.backends.base import TrainingBackend
from envs.backends.replay import ReplayBackend, reply_ids
from envs.environment import Environment, TrainingStep
from envs.examples import Example
from envs.rollout import RolloutGroup, ScoredRollout, rewards_and_errors, scored_groups
from rubrics.advantages import GroupCredit, episode_credit, is_errored, mixed_credit, reply_credit_per_node
from rubrics.loading import FileLoadError
from rubrics.types import Rollout
from train.config import AdvantageConfig, TrainConfig
from train.sampling import make_sampler, stratum_shares


@dataclass
class StepRollouts:
    """Everything generated and scored for one optimiser step."""

    groups: list[RolloutGroup]
    """Every group of the step, kept or dropped, in the order of its examples."""
    generate_s: float
    """Wall time of generation and scoring together (they overlap)."""
    policy_version: int
    """The optimiser step whose weights were current when these rollouts were requested."""
    decode: dict[str, float] = field(default_factory=dict)
    """What the backend's decode loops did for this step (``envs.backends.decode.DecodeStats``; empty for a
    backend that counts nothing, such as a vLLM server)."""
    cursor: dict[str, Any] = field(default_factory=dict)
    """The data cursor right after this step's examples were taken: what a checkpoint of the step holds."""
    shares: dict[str, float] = field(default_factory=dict)
    """How many of the step's examples each stratum gave (metrics ``sampler/stratum/<key>``; empty without
    strata)."""

    @property
    def weight_versions(self) -> list[int]:
        """The weight version of every model turn of the step, as the backend stamped it at generation
        (empty for a backend that stamps none)."""
        return [v for r in self.all_rollouts for v in r.weight_versions]

    def off_policy_steps(self, step: int) -> tuple[float, float]:
        """How many optimiser steps behind ``step``'s update the rollouts' weights were: the worst and the
        mean over model turns, measured from the versions stamped at generation (from the requested
        version when the backend stamps none)."""
        versions = self.weight_versions or [self.policy_version]
        return float(step - min(versions)), step - sum(versions) / len(versions)

    @property
    def kept_groups(self) -> list[RolloutGroup]:
        """The groups trained on (``rollouts_to_batch`` takes these)."""
        return [g for g in self.groups if g.kept]

    @property
    def all_rollouts(self) -> list[ScoredRollout]:
        """Every rollout of the step, kept or dropped (for metrics)."""
        return [r for g in self.groups for r in g.rollouts]

    @property
    def kept_advantages(self) -> list[float]:
        """The advantages of every rollout of the kept groups (for metrics)."""
        return [r.advantage for g in self.groups if g.kept for r in g.rollouts]

    @property
    def zero_variance_groups(self) -> int:
        """Groups whose rewards were all equal (kept or dropped)."""
        return sum(g.zero_variance for g in self.groups)

    @property
    def dropped_groups(self) -> int:
        """Groups left out of the loss (zero variance, or no healthy rollout)."""
        return sum(not g.kept for g in self.groups)


class Orchestrator:
    """Produces one ``StepRollouts`` per optimiser step."""

    def __init__(
        self,
        env: Environment,
        backend: TrainingBackend,
        examples: Sequence[Example],
        prompts_per_step: int,
        group_size: int,
        advantage: AdvantageConfig,
        seed: int,
        cursor: Mapping[str, Any] | None = None,
        sampler: str = "shuffle",
        guides: Mapping[str, Sequence[dict[str, str]]] | None = None,
        process: tuple[int, int] = (0, 1),
        max_steps: int = 1,
    ) -> None:
        if advantage.credit != "episode" and not env.credits_replies:
            raise ValueError(
                f"advantage.credit: {advantage.credit!r} needs an environment that credits each reply on "
                "its own (a multi-step environment scored by its own rubric); "
                f"{type(env).__name__} does not: use 'episode'"
            )
        self.env, self.backend, self.examples = env, backend, list(examples)
        self.prompts_per_step, self.group_size, self.advantage = prompts_per_step, group_size, advantage
        self.rank, self.world = process
        """This process's rank and the number of processes: each step takes ``world`` shares of the walk."""
        self.seed = seed + 7919 * self.rank
        """This process's sampling seed (each process samples its groups with its own)."""
        self.strata = [env.stratum(e) for e in self.examples]
        """The stratum of each example (``Environment.stratum``; None where it has none)."""
        self.cursor = make_sampler(sampler, self.strata, seed, cursor)
        """Which examples each step takes (``rollout.sampler``): one walk over all the training examples, the
        same on every process and seeded by the run's seed alone, so its state (what a checkpoint keeps)
        means the same whatever the number of processes that saved or resumes it."""
        self.taken: list[int] = []
        """The examples of the step ``produce`` took last."""
        self.guides = dict(guides) if guides else {}
        """Guided groups (``rollout.guide``): each example's demonstration (its messages) by the example's
        name; empty: no guides."""
        self._guide_replies: dict[str, list[list[int]]] = {}
        """The token ids of each demonstration's replies, made the first time its example is drawn."""
        self.run_seed, self.max_steps = seed, max_steps
        """The run's seed and steps: every group is asked for with its ``TrainingStep`` (what a schedule over
        the run, such as rubric scaffolding's, reads)."""

    @classmethod
    def from_config(
        cls,
        cfg: TrainConfig,
        env: Environment,
        backend: TrainingBackend,
        examples: Sequence[Example],
        seed: int,
        cursor: Mapping[str, Any] | None = None,
        process: tuple[int, int] = (0, 1),
    ) -> Orchestrator:
        """The orchestrator of process ``process`` (rank, number of processes) of a run: each step it takes
        ``rollout.prompts_per_step`` examples of ``rollout.group_size``, its share of the step's examples
        (``rollout.sampler`` walks all of ``examples``)."""
        rollout = cfg.rollout
        per_step, size = rollout.prompts_per_step, rollout.group_size
        guides = guide_messages(cfg, examples) if rollout.guide else None
        sampler, advantage = rollout.sampler, cfg.advantage
        return cls(
            env,
            backend,
            examples,
            per_step,
            size,
            advantage,
            seed,
            cursor,
            sampler,
            guides,
            process,
            cfg.max_steps,
        )

    def produce(self, step: int, policy_version: int) -> Coroutine[Any, Any, StepRollouts]:
        """Take the examples of ``step`` from the cursor now, in the caller's thread, and return the coroutine
        that generates and scores their groups (it may run later, in the rollout loop's thread). Its
        ``StepRollouts`` carries the cursor as it stands now (what a checkpoint of ``step`` must hold) and the
        step's examples per stratum. Every process takes the whole step's examples from the walk and keeps its
        own consecutive share, so no example is repeated or skipped whatever the number of processes."""
        per = self.prompts_per_step
        indices = self.cursor.take(per * self.world)[per * self.rank : per * (self.rank + 1)]
        self.taken = indices
        return self._produce(step, indices, policy_version, self.cursor.state(), self.shares())

    def shares(self) -> dict[str, float]:
        """How many of the examples ``produce`` took last each stratum gave: metrics ``sampler/stratum/<key>``
        (none when the environment has no strata)."""
        keys = sorted({key for key in self.strata if key is not None})
        return stratum_shares([self.strata[i] for i in self.taken], keys)

    async def _produce(
        self,
        step: int,
        indices: list[int],
        policy_version: int,
        cursor: dict[str, Any],
        shares: dict[str, float],
    ) -> StepRollouts:
        import torch

        torch.manual_seed(self.seed * 1_000_003 + step)  # sampling of this step depends on (seed, step) only
        start = time.perf_counter()
        stats = self.backend.decode_stats
        before = replace(stats) if stats is not None else None
        examples = [self.examples[i] for i in indices]
        training = TrainingStep(self.run_seed, step, self.max_steps)
        groups = await asyncio.gather(*(self._group(e, training) for e in examples))
        elapsed = time.perf_counter() - start
        return StepRollouts(
            groups=scored_groups(groups, self._credit(examples, groups), self.group_size),
            generate_s=elapsed,
            policy_version=policy_version,
            decode=stats.since(before).as_dict() if stats is not None and before is not None else {},
            cursor=cursor,
            shares=shares,
        )

    def _credit(self, examples: Sequence[Example], groups: Sequence[Sequence[Rollout]]) -> list[GroupCredit]:
        """The step's advantages, computed once from every group's rewards under the run's scale and credit
        (per reply: from the environment's ``reply_credit`` of each healthy rollout)."""
        rewards_NG, errored_NG = rewards_and_errors(groups)
        scale, drop = self.advantage.scale_rewards, self.advantage.drop_zero_variance_groups
        if self.advantage.credit == "episode":
            return episode_credit(rewards_NG, errored_NG, scale, drop)
        credits_NG = [
            [
                [] if is_errored(reward, bad) else self.env.reply_credit(example, r)
                for r, reward, bad in zip(g, rs, es, strict=True)
            ]
            for example, g, rs, es in zip(examples, groups, rewards_NG, errored_NG, strict=True)
        ]
        if self.advantage.credit == "mixed":
            return mixed_credit(rewards_NG, errored_NG, credits_NG, self.advantage.node_weight, scale, drop)
        return reply_credit_per_node(rewards_NG, errored_NG, credits_NG, scale, drop)

    async def _group(self, example: Example, training: TrainingStep) -> list[Rollout]:
        """The example's G sampled rollouts for ``training``'s step, scored, then its guide's
        (``rollout.guide``): its demonstration played through the environment by a ``ReplayBackend`` on the
        plain prompt (the demonstration answers it), scored by the same rubric."""
        rollouts = await self.env.run_group(example, self.backend, self.group_size, training)
        if not self.guides:
            return rollouts
        replies = self._guide_replies.get(example.name)
        if replies is None:
            tokenizer = self.env.tokenizer
            stop = [tokenizer.eos_token_id]
            messages = self.guides[example.name]
            replies = self._guide_replies[example.name] = reply_ids(
                tokenizer, self.env.system_prompt, messages, stop
            )
        return [*rollouts, *await self.env.run_group(example, ReplayBackend(replies, self.env.tokenizer), 1)]


def guide_messages(cfg: TrainConfig, examples: Sequence[Example]) -> dict[str, list[dict[str, str]]]:
    """The demonstration of every training example, by name, for guided groups (``rollout.guide``).

    Raises:
        FileLoadError: the file does not read, or an example has no demonstration in it (named)."""
    from train.demonstrations import load_demonstrations

    path = cfg.guide_demonstrations
    assert path is not None  # checked by the config
    demos = {d.scenario: d.messages for d in load_demonstrations(path)}
    missing = [e.name for e in examples if e.name not in demos]
    if missing:
        raise FileLoadError(
            path,
            f"rollout.guide: {len(missing)} training example(s) have no demonstration "
            f"(the first: {missing[0]!r}); every guided group plays its example's",
            field="scenario",
        )
    return {e.name: demos[e.name] for e in examples}
