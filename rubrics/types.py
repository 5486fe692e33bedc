"""Core types shared by every part of rubric-grpo.

States are plain ``dict`` objects: the source documents build them by hand, and that keeps working.
``State`` is the ``TypedDict`` that declares every key the environments and the rubrics write; every key is
optional so a hand-built dict with a few of them is a valid state. What a state holds is typed objects
(the multi-step verdicts are an ``EvaluationResult``, the criteria verdicts ``CriteriaVerdicts``);
``plain_state`` turns one into plain data where it leaves the process (a line of ``rubric-grpo score``'s
output; an evaluation's rollouts are written by ``envs.rollout.ScoredRollout``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
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
    """Reward minus the group's baseline, scaled as the caller asked (``rubrics.advantages``); 0.0 for
    errored rollouts, which are left out of the baseline. The training batch trains on this value."""
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
    """The flattened training sequence: ``ids``, ``loss_mask`` (1 on model tokens only), ``logprobs``,
    ``replies`` (each model reply's ``[start, end)`` in ``ids``)."""
    reply_nodes: list[str]
    """Multi-step environments: the requirement node each model reply answered (the walk's frontier then,
    names joined by ``+``), in order."""
    reply_credit: list[dict[str, Any]]
    """Credit per reply (``rubrics.advantages.assign_reply_advantages``): ``node`` and ``reward_to_go`` of
    each model reply, in order."""
    reply_advantages: list[float]
    """Credit per reply: each model reply's own advantage; the training batch puts it on that reply's
    tokens."""
    multistep: EvaluationResult
    """Verdicts of a multi-step rubric already made during the rollout (reused, never judged twice)."""
    criteria: CriteriaVerdicts
    """The verdicts of a per-prompt criteria rubric (``envs.criteria``): the example, its score and one
    verdict per criterion."""
    progress: object
    """An environment's own bookkeeping while the rollout runs (``MultiStepMultiTurnEnv``: its walk);
    removed when the rollout finishes, so never scored or written out."""


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
    """The G scored rollouts of one example, each with its advantage (``state["advantage"]``), as
    ``rubrics.advantages.assign_advantages`` returns them (the trainer's orchestrator turns each into a
    ``train.types.RolloutGroup``)."""

    states: list[State]
    """[G] the scored rollouts, in the order the environment returned them."""
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


@dataclass
class RequirementResult:
    """The verdict on one requirement of a multi-step rubric."""

    name: str
    """The requirement."""
    level: int
    """Its topological level in the DAG (0 for roots)."""
    answer: float | list[float] | None
    """The judged answer, a ``rubrics.multistep.requirements.Answer`` (None: the judge matched none)."""
    truth: float | list[float]
    """The scenario's ground-truth answer."""
    correct: bool
    """Whether the judged answer agrees with the ground truth."""
    reasoning: str = ""
    """The judge's explanation."""
    judge: str = ""
    """Which judge answered."""
    turn: int = 0
    """The model turn whose reply was judged (multi-turn environments)."""


@dataclass
class EvaluationResult:
    """Everything one walk over a multi-step rubric decided (``rubrics.multistep.walk``)."""

    results: list[RequirementResult] = field(default_factory=list)
    """Judged requirements in judging order."""
    stop_reason: StopReason = StopReason.TERMINAL
    """Why the walk ended (``terminal``, ``incorrect``, ``missing_ground_truth``), or the environment's
    reason when it stopped first."""

    @property
    def path(self) -> list[str]:
        """The requirements judged correct, in order: the path taken."""
        return [r.name for r in self.results if r.correct]

    @property
    def depth(self) -> int:
        """Levels reached: one more than the deepest correct requirement's level (0 when none)."""
        return max((r.level + 1 for r in self.results if r.correct), default=0)

    def by_name(self) -> dict[str, RequirementResult]:
        """Results keyed by requirement name."""
        return {r.name: r for r in self.results}

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for files and logs)."""
        return {
            "results": [asdict(r) for r in self.results],
            "stop_reason": StopReason(self.stop_reason).value,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvaluationResult:
        """Inverse of ``to_dict``."""
        return cls(
            results=[RequirementResult(**r) for r in data.get("results", [])],
            stop_reason=StopReason(data.get("stop_reason", StopReason.TERMINAL)),
        )


@dataclass(frozen=True)
class CriterionVerdict:
    """The verdict on one criterion of a per-prompt criteria rubric (``envs.criteria``)."""

    name: str | None
    """The criterion's name (None when it has none)."""
    weight: float
    """Its points: positive to earn, negative for a pitfall (as the criteria file gives it)."""
    tags: list[str]
    """Its tags (``axis:accuracy``)."""
    met: bool
    """Whether the reply meets it (for a pitfall: makes the mistake)."""
    judged_by: str
    """Who gave the verdict: ``rule`` (the criterion's own rule) or ``llm`` (the autograder)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for files and logs)."""
        return {
            "name": self.name,
            "weight": self.weight,
            "tags": list(self.tags),
            "met": self.met,
            "judged_by": self.judged_by,
        }


@dataclass(frozen=True)
class CriteriaVerdicts:
    """Everything grading one reply against its example's weighted criteria decided
    (``rubrics.criteria.tag_scores`` aggregates them by tag)."""

    example: str
    """The example's id."""
    score: float
    """The autograder's score, clipped to [0, 1]: the reward unless the environment's reward is unclipped
    (``env.clip_reward: false``: then ``raw_score / possible``)."""
    raw_score: float
    """Points of the criteria met (pitfalls count negative)."""
    possible: float
    """The example's positive points."""
    example_tags: list[str]
    """The example's own tags (``theme:...``)."""
    verdicts: list[CriterionVerdict]
    """One per criterion, in the example's order (empty for a grader that gives none)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for files and logs)."""
        return {
            "example": self.example,
            "score": self.score,
            "raw_score": self.raw_score,
            "possible": self.possible,
            "example_tags": list(self.example_tags),
            "verdicts": [v.to_dict() for v in self.verdicts],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CriteriaVerdicts:
        """Inverse of ``to_dict`` (numbers kept as written, so a file reads back to the same bytes).

        Raises:
            KeyError: a field is missing."""
        return cls(
            example=str(data["example"]),
            score=data["score"],
            raw_score=data["raw_score"],
            possible=data["possible"],
            example_tags=[str(t) for t in data["example_tags"]],
            verdicts=[
                CriterionVerdict(v["name"], v["weight"], list(v["tags"]), bool(v["met"]), str(v["judged_by"]))
                for v in data["verdicts"]
            ],
        )


def plain_state(state: State) -> dict[str, Any]:
    """The state as plain data, for a JSON line (``rubric-grpo score``'s output): the verdicts as
    ``EvaluationResult.to_dict`` and ``CriteriaVerdicts.to_dict``, everything else as it is."""
    plain: dict[str, Any] = dict(state)
    if (multistep := state.get("multistep")) is not None:
        plain["multistep"] = multistep.to_dict()
    if (criteria := state.get("criteria")) is not None:
        plain["criteria"] = criteria.to_dict()
    return plain


__all__ = [
    "CriteriaVerdicts",
    "CriterionVerdict",
    "EvaluationResult",
    "GroupRewardFunc",
    "IndividualRewardFunc",
    "Message",
    "Messages",
    "RequirementResult",
    "RewardFunc",
    "RewardWithMetrics",
    "ScoredGroup",
    "State",
    "StopReason",
    "TrajectoryStep",
    "plain_state",
]
