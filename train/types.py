"""The types the trainer's parts hand each other.

``RolloutGroup`` (from ``envs.rollout``, the one group type of training and evaluation): the scored rollouts
of one example. ``TrainBatch``: the one object that crosses from orchestration to optimisation, shapes in the
names: B sequences, T tokens (right-padded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from envs.rollout import RolloutGroup

if TYPE_CHECKING:  # train.types is imported by code that must load without torch
    import torch

__all__ = ["RolloutGroup", "TrainBatch"]


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
