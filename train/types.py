"""The types the trainer's parts hand each other.

``Rollout`` and ``RolloutGroup``: a scored rollout as the trainer sees it, built once from the environment's
finished ``State`` (``Rollout.from_state``, in the orchestrator), with only the fields that exist for it.
An evaluation's rollouts are another type, ``envs.rollout.ScoredRollout`` (its docstring says why not this
one). ``TrainBatch``: the one object that crosses from orchestration to optimisation, shapes in the names:
B sequences, T tokens (right-padded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envs.sequence import TokenSequence
from rubrics.advantages import ReplyCredit
from rubrics.types import Messages, State

if TYPE_CHECKING:  # train.types is imported by code that must load without torch
    import torch


@dataclass(frozen=True)
class Rollout:
    """One scored rollout, as the trainer's batch, metrics, failure check and samples read it."""

    sequence: TokenSequence | None
    """The training sequence; None when the rollout never produced a model turn (it failed first)."""
    completion: Messages | str
    """What the model produced and the environment answered (for the diversity metrics and the samples)."""
    scenario: str
    """The name of the example's scenario (``info["scenario"]``; empty when it has none)."""
    reward: float
    """The rubric's reward; NaN when the rollout failed or a reward function raised."""
    advantage: float
    """Its advantage (``rubrics.advantages``): every token of its sequence trains on it, unless
    ``reply_advantages`` is set. 0.0 for a failed rollout."""
    reply_advantages: list[float] | None
    """Credit per reply (``advantage.credit`` ``turn`` or ``mixed``): each model reply's own advantage, put on
    that reply's tokens; None under episode credit."""
    reply_credit: list[ReplyCredit]
    """Credit per reply: the node each model reply answered and its reward-to-go, in order (empty under
    episode credit or for a failed rollout)."""
    metrics: dict[str, float]
    """The raw value of every reward function and metric by name."""
    timing: dict[str, float]
    """Wall time per phase in milliseconds (``generation_ms``, ``scoring_ms``, ``judge_ms``, ``total_ms``)."""
    error: str | None
    """Why the rollout cannot be trusted, or None: a failed rollout is out of the baseline and the loss."""
    error_cause: str | None
    """The kind of failure (the exception's type, ``prompt_too_long``, ``reward_function``), or None."""
    is_truncated: bool
    """Its last reply stopped at the token limit."""
    stop_reason: str
    """Why it ended (a ``rubrics.types.StopReason`` value; empty when the environment set none)."""
    turn: int
    """Model turns taken."""
    completion_tokens: int
    """Tokens the model sampled, over every turn."""
    weight_versions: list[int]
    """The weight version each model turn was generated with, as the backend stamped it (empty when it
    stamps none)."""

    @classmethod
    def from_state(cls, state: State) -> Rollout:
        """The rollout of a finished, scored state with its advantage written.

        Raises:
            ValueError: the state has no advantage (``rubrics.advantages`` writes one into every state)."""
        if "advantage" not in state:
            raise ValueError(
                "a rollout reached the trainer without an advantage (rubrics.advantages writes it)"
            )
        sequence = state.get("sequence")
        trajectory = state.get("trajectory", [])
        reply_advantages = state.get("reply_advantages")
        return cls(
            sequence=None if sequence is None else TokenSequence.from_dict(sequence),
            completion=state.get("completion", ""),
            scenario=str((state.get("info") or {}).get("scenario", "")),
            reward=float(state.get("reward", math.nan)),
            advantage=state["advantage"],
            reply_advantages=None if reply_advantages is None else list(reply_advantages),
            reply_credit=[
                ReplyCredit(str(c["node"]), float(c["reward_to_go"])) for c in state.get("reply_credit", [])
            ],
            metrics=dict(state.get("metrics") or {}),
            timing=dict(state.get("timing") or {}),
            error=state.get("error") or None,
            error_cause=state.get("error_cause") or None,
            is_truncated=bool(state.get("is_truncated", False)),
            stop_reason=str(state.get("stop_reason") or ""),
            turn=int(state.get("turn", 0)),
            completion_tokens=sum(len(t.get("completion_ids", [])) for t in trajectory),
            weight_versions=[t["weight_version"] for t in trajectory if "weight_version" in t],
        )


@dataclass(frozen=True)
class RolloutGroup:
    """The G rollouts of one example, scored, with their advantages."""

    rollouts: list[Rollout]
    """[G] in the order the environment returned them."""
    zero_variance: bool
    """The healthy rewards are (nearly) all equal, or fewer than two: the group carries no signal."""
    kept: bool
    """Trained on; False when dropped (no healthy rollout, or zero variance and such groups are dropped)."""


@dataclass
class TrainBatch:
    """Training sequences of one optimiser step, as tensors (built from the rollouts' token ids)."""

    input_ids_BT: torch.Tensor
    """[B, T] int64: prompt, model and environment tokens, right-padded with the pad id."""
    attention_mask_BT: torch.Tensor
    """[B, T] int64: 1 on every real token (attention covers environment tokens too)."""
    loss_mask_BT: torch.Tensor
    """[B, T] float32: 1 on tokens the model sampled and the loss keeps (a truncated rollout's are 0 when
    ``loss.mask_truncated_completions``), 0 elsewhere."""
    inference_logprobs_BT: torch.Tensor
    """[B, T] float32: the inference engine's logprob of each sampled token; 0 where the mask is 0."""
    advantages_BT: torch.Tensor
    """[B, T] float32: the advantage of each token: a sequence's one advantage on every token (from its
    group), or each reply's own on that reply's tokens (credit per reply)."""

    @property
    def num_sequences(self) -> int:
        """B."""
        return int(self.input_ids_BT.shape[0])

    @property
    def num_loss_tokens(self) -> int:
        """Tokens that count in the loss."""
        return int(self.loss_mask_BT.sum().item())

    def slice(self, start: int, stop: int) -> TrainBatch:
        """Rows ``start:stop`` (a micro-batch), trimmed to their longest real sequence."""
        width = int(self.attention_mask_BT[start:stop].sum(dim=1).max().item())
        return TrainBatch(
            input_ids_BT=self.input_ids_BT[start:stop, :width],
            attention_mask_BT=self.attention_mask_BT[start:stop, :width],
            loss_mask_BT=self.loss_mask_BT[start:stop, :width],
            inference_logprobs_BT=self.inference_logprobs_BT[start:stop, :width],
            advantages_BT=self.advantages_BT[start:stop, :width],
        )

    def to(self, device: torch.device | str) -> TrainBatch:
        """The same batch on ``device``."""
        return TrainBatch(
            input_ids_BT=self.input_ids_BT.to(device),
            attention_mask_BT=self.attention_mask_BT.to(device),
            loss_mask_BT=self.loss_mask_BT.to(device),
            inference_logprobs_BT=self.inference_logprobs_BT.to(device),
            advantages_BT=self.advantages_BT.to(device),
        )
