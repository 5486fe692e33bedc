"""The one object that crosses from orchestration to optimisation. Shapes are in the names:
B sequences, T tokens (right-padded)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class TrainBatch:
    """Training sequences of one optimiser step (DESIGN.md section 3), as tensors."""

    input_ids_BT: Any
    """[B, T] long: prompt, model and environment tokens, right-padded with the pad id."""
    attention_mask_BT: Any
    """[B, T] long: 1 on every real token (attention covers environment tokens too)."""
    loss_mask_BT: Any
    """[B, T] float: 1 on tokens the model sampled (and that the loss keeps), 0 elsewhere."""
    inference_logprobs_BT: Any
    """[B, T] float: the inference engine's logprob of each sampled token; 0 where the mask is 0."""
    advantages_B: Any
    """[B] float: one advantage per sequence (from its group)."""
    group_ids_B: Any
    """[B] long: which group (example) each sequence belongs to."""
    truncated_B: Any
    """[B] bool: the rollout's last reply was cut by the token limit."""

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
            advantages_B=self.advantages_B[start:stop],
            group_ids_B=self.group_ids_B[start:stop],
            truncated_B=self.truncated_B[start:stop],
        )
