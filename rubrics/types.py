"""Core types shared by every part of rubric-grpo.

A rollout is a ``Rollout`` from the environment that runs it to the advantages: typed fields, the token
sequence a ``TokenSequence``, the verdicts an ``EvaluationResult`` or ``CriteriaVerdicts``. The seed API's
plain dict, ``State``, lives only at the edge: hand-built states scored by ``Rubric.score_rollout`` and
``score_group``, and the ``state`` a reward function may ask for. ``plain_state`` turns a state into plain
data where it leaves the process (a line of ``rubric-grpo score``'s output; an evaluation's rollouts are
written by ``envs.rollout.ScoredRollout``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
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
    """A rollout as a plain dict: the seed API's form, at the edge only. Hand-built states are scored by
    ``Rubric.score_rollout`` and ``Rubric.score_group`` (every key optional), and a reward function that asks
    for ``state`` receives one. Inside the pipeline a rollout is a ``Rollout``; its fields are these keys."""

    prompt: Messages | str
    completion: Messages | str
    answer: Any
    task: str
    info: dict[str, Any]
    trajectory: list[TrajectoryStep]
    reward: float
    advantage: float
    metrics: dict[str, float]
    timing: dict[str, float]
    error: str | None
    error_cause: str
    is_truncated: bool
    turn: int
    stop_reason: str
    sequence: TokenSequence
    reply_nodes: list[str]
    multistep: EvaluationResult
    criteria: CriteriaVerdicts


@dataclass(frozen=True)
class TokenSequence:
    """A rollout's training sequence, flattened from its trajectory (``envs.sequence.build_sequence``): the
    prompt, then per turn the model's tokens (loss mask 1) and the environment's (loss mask 0). Every list
    is [T]; the collate pads it as it is."""

    ids: list[int]
    """[T] every token: prompt, model turns, environment turns."""
    loss_mask: list[int]
    """[T] 1 on tokens the model sampled, 0 elsewhere."""
    logprobs: list[float]
    """[T] the inference engine's logprob of each sampled token; 0.0 where the mask is 0."""
    replies: list[tuple[int, int]] = field(default_factory=list)
    """[turns] where each model reply's tokens are: ``ids[start:end]``, in order."""

    @property
    def completion_tokens(self) -> int:
        """Tokens the model produced."""
        return sum(self.loss_mask)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TokenSequence:
        """From its JSON (``ids``, ``loss_mask``, ``logprobs``, ``replies``).

        Raises:
            KeyError: a list is missing."""
        return cls(
            ids=list(data["ids"]),
            loss_mask=list(data["loss_mask"]),
            logprobs=list(data["logprobs"]),
            replies=[(int(a), int(b)) for a, b in data.get("replies", [])],
        )

    def to_dict(self) -> dict[str, list[Any]]:
        """Plain data (a line of ``rollouts.jsonl``)."""
        return {
            "ids": self.ids,
            "loss_mask": self.loss_mask,
            "logprobs": self.logprobs,
            "replies": self.replies,
        }


@dataclass(eq=False)
class Rollout:
    """One rollout, from the moment an environment starts it until its group's advantages are computed: what
    the environment records, what the rubric writes when it scores it, what only some environments add.

    Mutable while it runs and is scored; once its advantage is known it becomes a frozen
    ``envs.rollout.ScoredRollout``. ``from_state`` and ``to_state`` are the dict edge (the seed API)."""

    prompt: Messages | str
    """The input the model saw: a chat conversation (the system prompt included) or a plain string."""
    completion: Messages | str = field(default_factory=list)
    """What the model produced and, in multi-turn rollouts, the environment's messages between replies."""
    answer: Any = ""
    """The example's ground truth or other reference data for scoring."""
    task: str = "default"
    """Task identifier, for datasets that mix tasks."""
    info: dict[str, Any] = field(default_factory=dict)
    """The example's metadata (``scenario``: its name, the cluster of every interval)."""
    trajectory: list[TrajectoryStep] = field(default_factory=list)
    """One entry per model turn with token ids and logprobs, exactly as the engine saw them."""
    timing: dict[str, float] = field(default_factory=dict)
    """Wall time per phase in milliseconds (``generation_ms``, ``scoring_ms``, ``total_ms``, ``judge_ms``)."""
    turn: int = 0
    """Model turns taken."""
    is_truncated: bool = False
    """The latest reply stopped at the token limit."""
    stop_reason: str | None = None
    """Why the rollout ended (a ``StopReason`` value); None while it runs."""
    sequence: TokenSequence | None = None
    """The training sequence, once the rollout has stopped; None when it failed before a model turn."""
    reward: float | None = None
    """The rubric's weighted reward; None until scored, NaN when a reward function errored."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Raw value of every reward function and metric by name; ``errors/<name>`` counts failures."""
    error: str | None = None
    """Why this rollout cannot be trusted (names the failing part and its message), or None."""
    error_cause: str | None = None
    """The kind of failure: the exception's type (``BackendError``, ``JudgeError``, ...),
    ``prompt_too_long`` or ``reward_function``."""
    reply_nodes: list[str] | None = None
    """Multi-step environments: the requirement node each model reply answered (the walk's frontier then,
    names joined by ``+``), in order; None elsewhere."""
    multistep: EvaluationResult | None = None
    """The verdicts of a multi-step rubric made during the rollout (reused, never judged twice)."""
    criteria: CriteriaVerdicts | None = None
    """The verdicts of a per-prompt criteria rubric: the example, its score and one verdict per criterion."""

    def fail(self, cause: str, message: str) -> None:
        """Mark the rollout failed: ``error`` (the message), ``error_cause`` (its kind, for metrics) and the
        stop reason ``error``."""
        self.error, self.error_cause, self.stop_reason = message, cause, StopReason.ERROR.value

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Rollout:
        """A hand-built state as a rollout (the seed API's dict; every key optional but ``prompt``, which
        defaults to an empty string). The lists and dicts are the state's own, not copies."""
        known = {f: state[f] for f in _STATE_FIELDS if state.get(f) is not None}
        return cls(prompt=state.get("prompt", ""), **known)

    def write_score_into(self, state: State) -> None:
        """Write what scoring set (reward, metrics, timing, error and its cause, verdicts) into ``state``."""
        assert self.reward is not None  # scored
        state["reward"], state["metrics"], state["timing"] = self.reward, self.metrics, self.timing
        if self.error is not None:
            state["error"] = self.error
        if self.error_cause is not None:
            state["error_cause"] = self.error_cause
        if self.multistep is not None:
            state["multistep"] = self.multistep
        if self.criteria is not None:
            state["criteria"] = self.criteria

    def to_state(self) -> State:
        """The rollout as the seed API's dict (what a reward function asking for ``state`` receives): every
        field that is set, the same objects."""
        state: dict[str, Any] = {"prompt": self.prompt}
        for key in _STATE_FIELDS:
            value = getattr(self, key)
            if value is not None:
                state[key] = value
        return state  # type: ignore[return-value]


_STATE_FIELDS = tuple(f.name for f in fields(Rollout) if f.name != "prompt")
"""The fields of a ``Rollout`` that a state may hold under the same key (``prompt`` aside)."""


@dataclass(frozen=True)
class RewardWithMetrics:
    """What a reward function may return instead of a float: its value plus extra metrics.

    The extras land in ``state["metrics"]`` under their own names (they add nothing to the reward)."""

    value: float
    """The function's value (weighted into the reward)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Extra metric values by name."""


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
    ``EvaluationResult.to_dict`` and ``CriteriaVerdicts.to_dict``, the sequence as ``TokenSequence.to_dict``,
    everything else as it is."""
    plain: dict[str, Any] = dict(state)
    if (sequence := state.get("sequence")) is not None:
        plain["sequence"] = sequence.to_dict()
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
    "Rollout",
    "State",
    "StopReason",
    "TokenSequence",
    "TrajectoryStep",
    "plain_state",
]
