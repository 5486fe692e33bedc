"""Core types shared by every part of rubric-grpo.

States are plain ``dict`` objects: the source documents build them by hand, and that keeps working.
``State`` is the ``TypedDict`` that documents the keys; every key is optional so a hand-built dict with a
few of them is a valid state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypedDict


class Message(TypedDict, total=False):
    """One chat message, OpenAI style."""

    role: str
    """``system``, ``user``, ``assistant`` or ``tool``."""
    content: str
    """The message text."""


Messages = list[dict[str, Any]]
"""A conversation: a list of chat messages (dicts with ``role`` and ``content``, see ``Message``)."""


class TrajectoryStep(TypedDict, total=False):
    """One model turn of a rollout, exactly as the inference engine saw it (never re-tokenised)."""

    prompt_ids: list[int]
    """Token ids the engine consumed for this turn (the whole context, not just the new part)."""
    completion_ids: list[int]
    """Token ids the engine sampled; never decoded and re-tokenised on the way to the loss."""
    completion_logprobs: list[float]
    """Log-probability of each sampled token under the inference engine."""
    messages: list[dict[str, Any]]
    """The chat messages of this turn (prompt side), for logging."""
    finish_reason: str
    """Why generation stopped: ``stop``, ``length`` or ``abort``."""
    weight_version: int
    """The optimiser step whose weights generated this turn, as the backend measured it (when it does)."""


class State(TypedDict, total=False):
    """Everything known about one rollout. Scoring writes ``reward``, ``advantage``, ``metrics``,
    ``timing`` and, when a reward function fails, ``error``."""

    prompt: Messages | str
    """The input the model saw: a chat conversation or a plain string."""
    completion: Messages | str
    """What the model produced (and, in multi-turn rollouts, what the environment answered)."""
    answer: Any
    """Ground truth or other reference data for scoring."""
    task: str
    """Task identifier, for datasets that mix tasks."""
    info: dict[str, Any]
    """Free-form metadata from the dataset."""
    trajectory: list[TrajectoryStep]
    """One entry per model turn with token ids and logprobs."""
    reward: float
    """Weighted sum of the reward functions; NaN when a reward function errored on this rollout."""
    advantage: float
    """Reward minus the group's baseline; 0.0 for errored rollouts, which are left out of the baseline."""
    metrics: dict[str, float]
    """Raw value of every reward function and metric by name; ``errors/<name>`` counts failures."""
    timing: dict[str, float]
    """Wall time per phase in milliseconds (``generation_ms``, ``scoring_ms``, ``total_ms``)."""
    error: str | None
    """Why this rollout cannot be trusted (names the failing function and its message), or None."""
    error_cause: str
    """The kind of failure, for metrics: the exception's type (``BackendError``, ``JudgeError``,
    ``TemplatePrefixError``, ...), ``prompt_too_long`` or ``reward_function``."""
    is_truncated: bool
    """True when generation stopped at the token limit."""
    turn: int
    """Number of model turns taken."""
    stop_reason: str
    """Why the rollout ended: a ``StopReason`` value (``completed``, ``terminal``, ``max_turns``, ...)."""
    sequence: dict[str, list[Any]]
    """The flattened training sequence: ``ids``, ``loss_mask`` (1 on model tokens only), ``logprobs``."""
    multistep: dict[str, Any]
    """Verdicts of a multi-step rubric already made during the rollout (reused, never judged twice)."""


@dataclass(frozen=True)
class RewardWithMetrics:
    """What a reward function may return instead of a float: its value plus extra metrics.

    The extras land in ``state["metrics"]`` under their own names (they add nothing to the reward)."""

    value: float
    """The function's value (weighted into the reward)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Extra metric values by name."""


@dataclass
class ScoredGroup:
    """The G scored rollouts of one example with their advantages: what travels from the orchestrator to
    the training batch (built by ``train.orchestrator``, advantages from ``rubrics.advantages``)."""

    states: list[State]
    """[G] the scored rollouts, in the order the environment returned them."""
    rewards_G: list[float]
    """[G] each rollout's reward (NaN where it has none)."""
    errored_G: list[bool]
    """[G] left out of the baseline: ``state["error"]`` is set or the reward is not finite."""
    advantages_G: list[float]
    """[G] each rollout's advantage under the run's scaling; 0.0 for errored rollouts."""
    zero_variance: bool
    """The healthy rewards are (nearly) all equal, or fewer than two: the group carries no signal."""
    kept: bool
    """Trained on; False when dropped (no healthy rollout, or zero variance and such groups are dropped)."""


IndividualRewardFunc = Callable[
    ..., float | RewardWithMetrics | Awaitable[float] | Awaitable[RewardWithMetrics]
]
"""Scores one rollout: arguments injected by name (``prompt``, ``completion``, ``answer``, ...)."""

GroupRewardFunc = Callable[..., list[float] | Awaitable[list[float]]]
"""Scores a group of rollouts at once: plural argument names (``completions``, ``answers``, ...)."""

RewardFunc = IndividualRewardFunc | GroupRewardFunc
"""Either kind of reward function."""


class StopReason(StrEnum):
    """Why a rollout, or a walk over a multi-step rubric, ended.

    A ``str`` enum: a member equals, formats as and JSON-encodes to its value, so comparisons with plain
    strings, ``state["stop_reason"]`` and the ``stop/<reason>`` metric names read as before. States and logs
    hold the plain value (``.value``)."""

    COMPLETED = "completed"
    """The environment ended the rollout: ``is_completed`` said so, ``env_response`` had nothing more to
    say, or a single-turn reply ended on a stop token."""
    MAX_TOKENS = "max_tokens"
    """A single-turn reply was cut at its token limit."""
    MAX_TURNS = "max_turns"
    """The model used every turn it was allowed (``max_turns``)."""
    TOKEN_BUDGET = "token_budget"
    """The rollout's token budget leaves no room for the next environment message and reply."""
    TERMINAL = "terminal"
    """Multi-step walk: every branch reached a requirement that unlocks nothing more."""
    INCORRECT = "incorrect"
    """Multi-step walk: some requirement was judged incorrect (or got no verdict), closing its branch."""
    MISSING_GROUND_TRUTH = "missing_ground_truth"
    """Multi-step walk: the scenario has no ground truth for a requirement the walk reached."""
    ERROR = "error"
    """The rollout failed (``error`` and ``error_cause`` say why): left out of scoring, baseline and loss."""


__all__ = [
    "GroupRewardFunc",
    "IndividualRewardFunc",
    "Message",
    "Messages",
    "RewardFunc",
    "RewardWithMetrics",
    "ScoredGroup",
    "State",
    "StopReason",
    "TrajectoryStep",
]
