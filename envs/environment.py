"""Environments: turn dataset examples (``envs.examples.Example``) into scored rollouts through an inference
backend.

``Environment`` holds the dataset, the rubric, the system prompt, the sampling settings, the turn limit
and a per-rollout token budget. ``SingleTurnEnv`` samples a whole group in one request; ``MultiTurnEnv``
alternates model replies and environment messages (``env_response``) until ``is_completed`` says so, the
turn limit or the token budget; subclasses fill in its hooks (``setup``, ``is_completed``, ``env_response``,
``finish``), each given the example and the typed ``rubrics.types.Rollout``, and never rewrite its loop. A
multi-turn environment keeps its own bookkeeping of a rollout in progress in a type of its own
(``MultiTurnEnv[P]``: ``setup`` returns it, the other hooks receive it). Every rollout carries the
trajectory (the exact ids the engine consumed and produced, logprobs; ``docs/architecture.md``), timing per
phase and a ``StopReason`` value.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from envs.backends.base import InferenceBackend, Sample, SamplingParams
from envs.chat import chat_ids, next_turn_ids
from envs.examples import Example
from envs.rollout import ScoredRollout
from envs.sequence import build_sequence
from rubrics.advantages import ReplyCredit
from rubrics.multistep.probe import PolicyScore
from rubrics.rubric import Rubric
from rubrics.types import Messages, Rollout, StopReason, TrajectoryStep

P = TypeVar("P")
"""A multi-turn environment's bookkeeping of one rollout in progress (``MultiTurnEnv.setup`` makes it)."""


@dataclass(frozen=True)
class TrainingStep:
    """Where a training run stands when it asks for a group: what an environment may vary its training
    prompts by (rubric scaffolding's hints). Held-out evaluation passes none, so it sees the plain prompts."""

    seed: int
    """The run's seed."""
    step: int
    """The 0-based optimiser step the group is for."""
    max_steps: int
    """The run's optimiser steps."""


def completion_messages(rollout: Rollout) -> list[dict[str, Any]]:
    """The rollout's completion as the message list that multi-turn rollouts build."""
    if not isinstance(rollout.completion, list):
        raise TypeError("this rollout's completion is a string; environments build message lists")
    return rollout.completion


def _prompt_too_long(rollout: Rollout, tokens: int, budget: int) -> None:
    rollout.fail("prompt_too_long", f"prompt of {tokens} tokens exceeds the token budget {budget}")


class Environment:
    """Base: a dataset of examples and a rubric."""

    def __init__(
        self,
        dataset: Sequence[Example | Mapping[str, Any]],
        rubric: Rubric,
        tokenizer: Any,
        system_prompt: str | None = None,
        sampling: SamplingParams | None = None,
        max_turns: int = 1,
        max_total_tokens: int = 2048,
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.dataset = [e if isinstance(e, Example) else Example.from_dict(e) for e in dataset]
        """The examples; a plain dict (``prompt``, ``answer``, ``info``, ``task``) becomes a plain-prompt
        ``Example``."""
        self.rubric = rubric
        """Scores finished rollouts."""
        self.tokenizer = tokenizer
        """Renders chat messages to token ids (the policy's tokenizer)."""
        self.system_prompt = system_prompt
        """Prepended as a system message when set."""
        self.sampling = sampling or SamplingParams()
        """Sampling settings per model turn (``n`` is set per call)."""
        self.max_turns = max_turns
        """Most model replies in one rollout."""
        self.max_total_tokens = max_total_tokens
        """Token budget of one rollout: prompt, replies and environment messages together."""

    # -- what the trainer and ``rubric-grpo eval`` ask every environment ------------------------------

    async def probe(self, train: Sequence[Example], held: Sequence[Example]) -> list[PolicyScore]:
        """The trivial policies this environment's reward could be gamed by, scored on the held-out examples
        ``held`` (``train``: what a policy that memorised the training set would answer); each a row of
        ``report.md``'s table beside the model. Default: none."""
        return []

    def report_sections(self, evaluations: Mapping[str, Sequence[ScoredRollout]]) -> list[str]:
        """Markdown lines this environment adds to ``report.md``, from the held-out rollouts of each evaluated
        model (``untrained``, ``warm start only``, ``trained``). Default: none."""
        return []

    def summary_metrics(self, rollouts: Sequence[ScoredRollout]) -> dict[str, float]:
        """Numbers this environment adds to an evaluation's ``summary.json`` (and so to the logged
        ``eval/...`` metrics) from its scored rollouts. Default: none."""
        return {}

    def step_metrics(self, rollouts: Sequence[ScoredRollout]) -> dict[str, float]:
        """Metrics of its own over one step's rollouts, and what the environment spent since the
        last call (an LLM judge's calls, tokens, seconds), logged with every step. Default: nothing."""
        return {}

    @property
    def credits_replies(self) -> bool:
        """Whether ``reply_credit`` can credit each model reply of a rollout on its own (what
        ``advantage.credit: turn`` needs). Default: no."""
        return False

    def reply_credit(self, example: Example, rollout: Rollout) -> list[ReplyCredit]:
        """Each model reply of the scored ``rollout`` of ``example``, in order: the node it answered and its
        reward-to-go (``rubrics.advantages.reply_credit_per_node`` normalises them). Only where
        ``credits_replies``."""
        raise NotImplementedError(f"{type(self).__name__} does not credit replies one by one")

    def stratum(self, example: Example) -> str | None:
        """The stratum of ``example``: a stable key for the kind of example it is, such as the ground truth of
        its first decision. The balanced sampler (``rollout.sampler: balanced``) gives every stratum an equal
        share of each step, and every step logs how many examples each gave. Default None: no strata."""
        return None

    # -- building blocks -----------------------------------------------------------------------------

    def initial_messages(self, example: Example) -> list[dict[str, Any]]:
        """The opening conversation of an example."""
        prompt = example.prompt
        messages = (
            [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
        )
        if self.system_prompt and not (messages and messages[0].get("role") == "system"):
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return messages

    def new_rollout(self, example: Example, messages: list[dict[str, Any]]) -> Rollout:
        """A fresh rollout of ``example`` that opens with ``messages``."""
        return Rollout(
            prompt=messages,
            completion=[],
            answer=example.answer,
            task=example.task,
            info=example.info,
            timing={"generation_ms": 0.0, "scoring_ms": 0.0, "total_ms": 0.0},
        )

    def record_turn(
        self, rollout: Rollout, prompt_ids: list[int], sample: Sample, messages: Messages
    ) -> None:
        """Append one model turn to the rollout's trajectory and completion."""
        step: TrajectoryStep = {
            "prompt_ids": list(prompt_ids),
            "completion_ids": list(sample.completion_ids),
            "completion_logprobs": list(sample.logprobs),
            "messages": [dict(m) for m in messages],
            "finish_reason": sample.finish_reason,
        }
        if "weight_version" in sample.meta:
            step["weight_version"] = int(sample.meta["weight_version"])
        rollout.trajectory.append(step)
        completion_messages(rollout).append({"role": "assistant", "content": sample.text})
        rollout.turn += 1
        rollout.is_truncated = sample.finish_reason == "length"

    @staticmethod
    def attach_sequence(rollout: Rollout) -> None:
        """Attach the training sequence (ids, loss mask on model tokens, logprobs) to a rollout that ran and
        has stopped (its ``stop_reason`` set)."""
        if rollout.trajectory:
            rollout.sequence = build_sequence(rollout.trajectory)

    async def rollout_group(
        self, example: Example, backend: InferenceBackend, n: int, training: TrainingStep | None = None
    ) -> list[Rollout]:
        """``n`` rollouts of one example (a GRPO group), unscored; ``training``: the training step they are
        for (None: an evaluation)."""
        raise NotImplementedError

    def failed_rollout(self, example: Example, exc: Exception) -> Rollout:
        """A rollout that raised ``exc``: a fresh one marked with the error and its cause."""
        rollout = self.new_rollout(example, self.initial_messages(example))
        rollout.fail(type(exc).__name__, f"{type(exc).__name__}: {exc}")
        return rollout

    async def run_group(
        self, example: Example, backend: InferenceBackend, n: int, training: TrainingStep | None = None
    ) -> list[Rollout]:
        """``n`` rollouts of one example, scored with the rubric (the example injected as ``example``):
        rewards and metrics. Advantages are the caller's, over the groups it holds
        (``rubrics.advantages.episode_credit``). ``training``: the training step the group is for (None, an
        evaluation's group: the plain prompts).

        A rollout that failed (the backend, a judge after its retries, the chat template) is marked and
        left out of scoring: reward NaN, later advantage 0.0, out of its group's baseline and of the loss.
        The other rollouts of the group go on."""
        start = time.perf_counter()
        rollouts = await self.rollout_group(example, backend, n, training)
        await self.rubric.score_rollouts([r for r in rollouts if not r.error], example)
        for r in rollouts:
            if r.reward is None:  # failed before scoring (scoring errors keep their metrics)
                r.reward, r.metrics = math.nan, {}
            r.timing["total_ms"] = (time.perf_counter() - start) * 1000.0
        return rollouts


class SingleTurnEnv(Environment):
    """One model reply per rollout; the whole group is sampled in one request."""

    async def rollout_group(
        self, example: Example, backend: InferenceBackend, n: int, training: TrainingStep | None = None
    ) -> list[Rollout]:
        return await self.sample_group(example, backend, self.initial_messages(example), n)

    async def sample_group(
        self, example: Example, backend: InferenceBackend, messages: list[dict[str, Any]], n: int
    ) -> list[Rollout]:
        """``n`` rollouts of ``example`` that open with ``messages``, sampled in one request, unscored."""
        prompt_ids = chat_ids(self.tokenizer, messages)
        budget = self.max_total_tokens - len(prompt_ids)
        rollouts = [self.new_rollout(example, messages) for _ in range(n)]
        if budget < 1:
            for r in rollouts:
                _prompt_too_long(r, len(prompt_ids), self.max_total_tokens)
            return rollouts
        start = time.perf_counter()
        try:
            samples = await backend.generate(
                prompt_ids, replace(self.sampling, n=n, max_tokens=min(self.sampling.max_tokens, budget))
            )
        except Exception as exc:  # one request for the whole group: every rollout of it failed
            return [self.failed_rollout(example, exc) for _ in range(n)]
        elapsed = (time.perf_counter() - start) * 1000.0
        for rollout, sample in zip(rollouts, samples, strict=True):
            self.record_turn(rollout, prompt_ids, sample, messages)
            rollout.timing["generation_ms"] = elapsed
            reason = StopReason.MAX_TOKENS if sample.finish_reason == "length" else StopReason.COMPLETED
            rollout.stop_reason = reason.value
            self.attach_sequence(rollout)
        return rollouts


class MultiTurnEnv(Environment, Generic[P]):
    """Model replies alternate with environment messages until ``is_completed``, ``max_turns`` or the
    token budget. Subclasses implement ``env_response`` and may override ``setup`` (per-rollout setup: it
    returns the environment's bookkeeping ``P`` of the rollout, which every later hook receives),
    ``is_completed`` and ``finish`` (per-rollout teardown, before the training sequence is attached).

    After each reply the loop asks, in order: ``is_completed`` (stop with its reason), ``max_turns``
    (stop: ``max_turns``), ``env_response`` (no messages: stop, ``completed``), the token budget (no room
    for the messages and another reply: stop before them, ``token_budget``). A rollout therefore always
    ends on a model reply. Each reply may use at most the tokens left in the budget."""

    async def setup(self, example: Example, rollout: Rollout) -> P:
        """Per-rollout setup, once the prompt fits the budget and before the first reply; returns what the
        environment tracks while the rollout runs (default: None)."""
        return None  # type: ignore[return-value]

    async def env_response(
        self, example: Example, rollout: Rollout, progress: P, messages: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The environment's next messages (usually one user message) after the model's reply."""
        raise NotImplementedError

    async def is_completed(
        self, example: Example, rollout: Rollout, progress: P, messages: list[dict[str, Any]]
    ) -> bool | StopReason:
        """Whether the rollout is finished after the latest reply (the last of ``messages``): False to go
        on; a ``StopReason`` to stop with it; True to stop with ``rollout.stop_reason`` when the subclass
        set one, else ``completed``."""
        return False

    def finish(self, example: Example, rollout: Rollout, progress: P) -> None:
        """Per-rollout teardown once the rollout has stopped (its ``stop_reason`` set; default: none)."""

    async def rollout_group(
        self, example: Example, backend: InferenceBackend, n: int, training: TrainingStep | None = None
    ) -> list[Rollout]:
        return list(await asyncio.gather(*(self._rollout_or_failure(example, backend) for _ in range(n))))

    async def _rollout_or_failure(self, example: Example, backend: InferenceBackend) -> Rollout:
        """``rollout``, or a failed rollout when it raised: one rollout's failure ends only that rollout."""
        try:
            return await self.rollout(example, backend)
        except Exception as exc:
            return self.failed_rollout(example, exc)

    async def rollout(self, example: Example, backend: InferenceBackend) -> Rollout:
        """One multi-turn rollout."""
        messages = self.initial_messages(example)
        rollout = self.new_rollout(example, messages)
        prompt_ids = chat_ids(self.tokenizer, messages)
        if len(prompt_ids) >= self.max_total_tokens:
            _prompt_too_long(rollout, len(prompt_ids), self.max_total_tokens)
            return rollout
        progress = await self.setup(example, rollout)
        while True:
            budget = self.max_total_tokens - len(prompt_ids)  # >= 1: checked before the prompt grew
            start = time.perf_counter()
            (sample,) = await backend.generate(
                prompt_ids, replace(self.sampling, n=1, max_tokens=min(self.sampling.max_tokens, budget))
            )
            rollout.timing["generation_ms"] += (time.perf_counter() - start) * 1000.0
            self.record_turn(rollout, prompt_ids, sample, messages)
            messages = [*messages, {"role": "assistant", "content": sample.text}]
            completed = await self.is_completed(example, rollout, progress, messages)
            if completed:
                if isinstance(completed, StopReason):
                    rollout.stop_reason = completed.value
                elif rollout.stop_reason is None:
                    rollout.stop_reason = StopReason.COMPLETED.value
                break
            if rollout.turn >= self.max_turns:
                rollout.stop_reason = StopReason.MAX_TURNS.value
                break
            reply = await self.env_response(example, rollout, progress, messages)
            if not reply:
                rollout.stop_reason = StopReason.COMPLETED.value
                break
            new_messages = [*messages, *reply]
            new_ids = (
                prompt_ids
                + sample.completion_ids
                + next_turn_ids(self.tokenizer, prompt_ids, sample.completion_ids, new_messages)
            )
            if len(new_ids) >= self.max_total_tokens:  # no room for another reply: stop before the message
                rollout.stop_reason = StopReason.TOKEN_BUDGET.value
                break
            completion_messages(rollout).extend(reply)
            prompt_ids, messages = new_ids, new_messages
        self.finish(example, rollout, progress)
        self.attach_sequence(rollout)
        return rollout
