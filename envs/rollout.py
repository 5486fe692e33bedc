"""``ScoredRollout``: one finished, scored rollout with its advantage, frozen, built once from the
environment's ``rubrics.types.Rollout`` and its credit (``ScoredRollout.from_rollout``); ``RolloutGroup``:
the G scored rollouts of one example, the one group type of training and evaluation (``scored_groups``).

Training and evaluation both use it. The trainer's orchestrator builds one per rollout of a step
(``train.orchestrator``): the batch, the step's metrics, the environment's ``step_metrics``, the failure
check and the samples read it. An evaluation builds one per rollout as its groups finish
(``envs.evaluation.run``): the summary, the environment's ``summary_metrics`` and ``report_sections``,
the trainer's ``report.md`` and the rubric probe's statistics (``for_probe``) read it. It becomes plain
data in one place, ``to_dict`` (a line of ``rollouts.jsonl``), and is read back in one place,
``from_dict`` (``envs.evaluation.read_evaluation``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rubrics.advantages import GroupCredit, ReplyCredit, RolloutCredit
from rubrics.intervals import cluster_of
from rubrics.multistep.probe import ProbeRollout
from rubrics.types import CriteriaVerdicts, EvaluationResult, Messages, Rollout, TokenSequence, TrajectoryStep

SCORING_FAILED = "reward_function"
"""The ``error_cause`` of a rollout that ran and whose scoring failed (``rubrics.rubric.write_score``)."""


@dataclass(frozen=True)
class ScoredRollout:
    """One finished, scored rollout, with its advantage within its group."""

    prompt: Messages | str
    """The opening conversation the model saw (the system prompt included)."""
    completion: Messages | str
    """The model's replies and, in multi-turn rollouts, the environment's messages between them."""
    answer: Any
    """The example's ground truth (a scenario's answers by requirement; empty for a criteria example)."""
    task: str
    """The example's task."""
    info: dict[str, Any]
    """The example's metadata (``scenario``: its name, the cluster of every interval)."""
    trajectory: list[TrajectoryStep]
    """Every model turn as the inference engine saw it (empty when the rollout failed before one)."""
    timing: dict[str, float]
    """Wall time per phase in milliseconds (``generation_ms``, ``scoring_ms``, ``total_ms``, ``judge_ms``)."""
    turn: int
    """Model turns taken."""
    is_truncated: bool
    """Its last reply stopped at the token limit."""
    stop_reason: str
    """Why it ended: a ``rubrics.types.StopReason`` value (``error`` when it failed)."""
    reward: float
    """The rubric's reward; NaN when the rollout failed or a reward function raised."""
    metrics: dict[str, float]
    """The raw value of every reward function and metric by name."""
    advantage: float
    """Reward minus its group's baseline, scaled as the caller asked (``rubrics.advantages``; an evaluation's
    are unscaled): every token of its sequence trains on it, unless ``reply_advantages`` is set. 0.0 for a
    failed rollout."""
    reply_nodes: list[str] | None = None
    """Multi-step environments: the requirements each model reply answered (joined by ``+``); None
    elsewhere, or when the rollout failed before its walk began."""
    multistep: EvaluationResult | None = None
    """The multi-step walk's verdicts, with its stop reason; None without a walk."""
    sequence: TokenSequence | None = None
    """The training sequence; None when the rollout failed before a model turn."""
    criteria: CriteriaVerdicts | None = None
    """The criteria environment's verdicts; None elsewhere, or when the rollout was not graded."""
    error: str | None = None
    """Why the rollout cannot be trusted (the failing part and its message), or None."""
    error_cause: str | None = None
    """The kind of failure (the exception's type, ``prompt_too_long``, ``reward_function``), or None."""
    reply_credit: list[ReplyCredit] | None = None
    """Training with credit per reply (``advantage.credit`` ``turn`` or ``mixed``): the node each model reply
    answered and its reward-to-go, in order; None otherwise (an evaluation assigns none)."""
    reply_advantages: list[float] | None = None
    """Training with credit per reply: each model reply's own advantage, put on that reply's tokens; None
    otherwise."""

    @property
    def scenario(self) -> str:
        """The cluster of its intervals: the scenario's name (``info["scenario"]``), else the prompt."""
        return cluster_of({"info": self.info, "prompt": self.prompt})

    @property
    def healthy(self) -> bool:
        """Neither failed nor errored in scoring: a finite reward every statistic counts."""
        return not self.error and math.isfinite(self.reward)

    @property
    def replies(self) -> list[str]:
        """The model's replies, in order."""
        if not isinstance(self.completion, list):
            return [self.completion]
        return [str(m.get("content", "")) for m in self.completion if m.get("role") == "assistant"]

    @property
    def completion_tokens(self) -> int:
        """Tokens the model sampled, over every turn."""
        return sum(len(step["completion_ids"]) for step in self.trajectory)

    @property
    def weight_versions(self) -> list[int]:
        """The weight version each model turn was generated with, as the backend stamped it (empty when it
        stamps none)."""
        return [step["weight_version"] for step in self.trajectory if "weight_version" in step]

    def for_probe(self) -> ProbeRollout:
        """What the rubric probe's statistics (``score_rollouts``) read: scenario, reward and verdicts."""
        return ProbeRollout(self.scenario, self.reward, self.multistep.results if self.multistep else [])

    @classmethod
    def from_rollout(cls, rollout: Rollout, credit: RolloutCredit) -> ScoredRollout:
        """The finished ``rollout``, scored, with its ``credit`` (``rubrics.advantages``).

        Raises:
            ValueError: it was never scored, or has no stop reason."""
        if rollout.reward is None or rollout.stop_reason is None:
            raise ValueError("a scored rollout needs a reward and a stop reason: score the rollout first")
        return cls(
            prompt=rollout.prompt,
            completion=rollout.completion,
            answer=rollout.answer,
            task=rollout.task,
            info=rollout.info,
            trajectory=rollout.trajectory,
            timing=rollout.timing,
            turn=rollout.turn,
            is_truncated=rollout.is_truncated,
            stop_reason=rollout.stop_reason,
            reward=rollout.reward,
            metrics=rollout.metrics,
            advantage=credit.advantage,
            reply_nodes=rollout.reply_nodes,
            multistep=rollout.multistep,
            sequence=rollout.sequence,
            criteria=rollout.criteria,
            error=rollout.error,
            error_cause=rollout.error_cause,
            reply_credit=credit.reply_credit,
            reply_advantages=credit.reply_advantages,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScoredRollout:
        """Inverse of ``to_dict``: a line of ``rollouts.jsonl``, read back.

        Raises:
            ValueError: naming the field that is missing, unknown or of the wrong form."""
        unknown = [k for k in data if k not in cls.__dataclass_fields__]
        if unknown:
            raise ValueError(f"field {unknown[0]!r} is not one of a scored rollout")
        missing = [k for k in _ALWAYS if k not in data]
        if missing:
            raise ValueError(f"field {missing[0]!r} is missing")
        try:
            multistep, criteria, sequence = data.get("multistep"), data.get("criteria"), data.get("sequence")
            credit = data.get("reply_credit")
            return cls(
                **{k: data[k] for k in _ALWAYS},
                reply_nodes=data.get("reply_nodes"),
                reply_credit=None
                if credit is None
                else [ReplyCredit(str(c["node"]), c["reward_to_go"]) for c in credit],
                reply_advantages=data.get("reply_advantages"),
                multistep=None if multistep is None else EvaluationResult.from_dict(multistep),
                sequence=None if sequence is None else TokenSequence.from_dict(sequence),
                criteria=None if criteria is None else CriteriaVerdicts.from_dict(criteria),
                error=data.get("error"),
                error_cause=data.get("error_cause"),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"does not read as a scored rollout: {type(exc).__name__}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """Plain data: a line of ``rollouts.jsonl``. The keys come in the order an environment writes them
        into its state, so the file reads as it always has: what every rollout starts with, then, for a
        rollout that failed before scoring, the failure and its stop reason; otherwise the walk's nodes, the
        stop reason, the verdicts and sequence, the score and a scoring error; the credit per reply, and last
        the advantage."""
        out: dict[str, Any] = {
            "prompt": self.prompt,
            "completion": self.completion,
            "answer": self.answer,
            "task": self.task,
            "info": self.info,
            "trajectory": self.trajectory,
            "timing": self.timing,
            "turn": self.turn,
            "is_truncated": self.is_truncated,
        }
        failed_first = self.error is not None and self.error_cause != SCORING_FAILED
        if failed_first:
            out.update(self._error())
            out["stop_reason"] = self.stop_reason
        else:
            if self.reply_nodes is not None:
                out["reply_nodes"] = self.reply_nodes
            out["stop_reason"] = self.stop_reason
            if self.multistep is not None:
                out["multistep"] = self.multistep.to_dict()
            if self.sequence is not None:
                out["sequence"] = self.sequence.to_dict()
            if self.criteria is not None:
                out["criteria"] = self.criteria.to_dict()
        out.update(reward=self.reward, metrics=self.metrics)
        if not failed_first:
            out.update(self._error())
        if self.reply_credit is not None:
            out["reply_credit"] = [
                {"node": c.node, "reward_to_go": c.reward_to_go} for c in self.reply_credit
            ]
        if self.reply_advantages is not None:
            out["reply_advantages"] = self.reply_advantages
        out["advantage"] = self.advantage
        return out

    def _error(self) -> dict[str, str]:
        """``error`` and ``error_cause``, those that are set."""
        pairs = (("error", self.error), ("error_cause", self.error_cause))
        return {k: v for k, v in pairs if v is not None}


_ALWAYS = (
    "prompt",
    "completion",
    "answer",
    "task",
    "info",
    "trajectory",
    "timing",
    "turn",
    "is_truncated",
    "stop_reason",
    "reward",
    "metrics",
    "advantage",
)
"""The keys every scored rollout of an environment has."""


@dataclass(frozen=True)
class RolloutGroup:
    """The G rollouts of one example, scored, with their advantages."""

    rollouts: list[ScoredRollout]
    """[G] in the order the environment returned them."""
    zero_variance: bool
    """The healthy rewards are (nearly) all equal, or fewer than two: the group carries no signal."""
    kept: bool
    """Trained on; False when dropped (no healthy rollout, or zero variance and such groups are dropped)."""
    guides: list[ScoredRollout] = field(default_factory=list)
    """The replayed demonstrations of a guided group (``rollout.guide``): in the group's baseline and in the
    batch, never in the step's reward or rollout metrics (they were not sampled)."""

    @property
    def trained(self) -> list[ScoredRollout]:
        """Every rollout the batch takes: the sampled ones, then the guides."""
        return [*self.rollouts, *self.guides]


def rewards_and_errors(groups: Sequence[Sequence[Rollout]]) -> tuple[list[list[float]], list[list[bool]]]:
    """``rewards_NG`` and ``errored_NG`` of scored groups: what ``rubrics.advantages`` computes from."""
    rewards_NG = [[math.nan if r.reward is None else r.reward for r in g] for g in groups]
    return rewards_NG, [[bool(r.error) for r in g] for g in groups]


def scored_groups(
    groups: Sequence[Sequence[Rollout]], credits: Sequence[GroupCredit], sampled: int | None = None
) -> list[RolloutGroup]:
    """Each group's rollouts with their credit, frozen; the first ``sampled`` of a group (all when None) are
    its sampled rollouts, the rest its guides."""
    out = []
    for rollouts, credit in zip(groups, credits, strict=True):
        scored = [ScoredRollout.from_rollout(r, c) for r, c in zip(rollouts, credit.rollouts_G, strict=True)]
        cut = len(scored) if sampled is None else sampled
        out.append(RolloutGroup(scored[:cut], credit.zero_variance, credit.kept, guides=scored[cut:]))
    return out
