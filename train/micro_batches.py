"""Which sequences of an optimiser step share a forward pass, and the packed forward of flash-attention.

Two plans (``plan_micro_batches``):

- a fixed count: ``optim.micro_batch_size`` sequences at a time, in the batch's order, each micro-batch
  padded to its longest sequence (the default);
- a token budget (``optim.micro_batch_tokens``): the sequences sorted longest first, then cut greedily into
  micro-batches whose padded size, rows x the longest, stays within the budget. Multi-turn rollouts of 200
  to 900 tokens then share passes with rollouts of about their own length, instead of padding short ones to
  the longest of a fixed group; short ones travel many to a pass.

Where the policy runs flash-attention 2 (``model.attn_implementation``, a CUDA host with flash-attn), a
micro-batch of the token budget is packed instead: its sequences are laid end to end in one row with
``position_ids`` restarting at 0 for each, no padding at all, and the budget counts their sum. The attention
of each sequence then sees only itself (transformers reads the sequence boundaries from ``position_ids``).
sdpa and eager attention on a CPU do not pack: there the packed row would attend through a
[tokens x tokens] block-diagonal mask, which costs more than the padding it saves.

The loss of every micro-batch is normalised against the whole step (``train.loss``), so how the sequences
are grouped changes the update only by float rounding: the sums run in another order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from train.types import TrainBatch

if TYPE_CHECKING:  # train.micro_batches loads without torch
    import torch


@dataclass(frozen=True)
class MicroBatchPlan:
    """How the rows of one process's batch are split into forward passes."""

    order: list[int]
    """The rows of the batch in the order the micro-batches take them (the identity for a fixed count)."""
    bounds: list[tuple[int, int]]
    """``[start, stop)`` of each micro-batch within ``order``."""
    packed: bool
    """Whether each micro-batch runs as one padding-free packed row (flash-attention 2)."""


def packs_sequences(attn_implementation: str | None, micro_batch_tokens: int) -> bool:
    """Whether micro-batches are packed: only under a token budget, and only when the loaded policy runs
    flash-attention 2 (the one kernel here that attends within packed sequences without a dense mask)."""
    return micro_batch_tokens > 0 and attn_implementation == "flash_attention_2"


def loaded_attn_implementation(model: torch.nn.Module) -> str | None:
    """The attention kernel a (maybe wrapped, maybe peft) transformers model was loaded with."""
    inner = getattr(model, "module", model)  # DDP or a DeepSpeed engine
    config = getattr(inner, "config", None)
    return getattr(config, "_attn_implementation", None)


def plan_micro_batches(
    lengths_B: Sequence[int], micro_batch_size: int, micro_batch_tokens: int, packed: bool = False
) -> MicroBatchPlan:
    """The micro-batches of a batch whose rows hold ``lengths_B`` real tokens.

    ``micro_batch_tokens`` 0: ``micro_batch_size`` rows at a time, in order. Otherwise the rows longest
    first (ties in batch order), a new micro-batch started whenever the next row would take the current one
    over the budget: ``(rows + 1) x longest`` padded, the sum of the lengths when ``packed``. A row longer
    than the budget alone is a micro-batch of its own (the config refuses a budget below
    ``env.max_total_tokens``, so it does not happen in a run)."""
    b = len(lengths_B)
    if micro_batch_tokens == 0:
        starts = range(0, b, micro_batch_size)
        return MicroBatchPlan(list(range(b)), [(s, min(s + micro_batch_size, b)) for s in starts], False)
    order = sorted(range(b), key=lambda i: (-lengths_B[i], i))
    bounds: list[tuple[int, int]] = []
    start, used = 0, 0
    for k, row in enumerate(order):
        n = lengths_B[row]
        # longest first: the micro-batch's first row is its longest
        grown = used + n if packed else (k - start + 1) * lengths_B[order[start]]
        if k > start and grown > micro_batch_tokens:
            bounds.append((start, k))
            start, grown = k, n
        used = grown
    if b:
        bounds.append((start, b))
    return MicroBatchPlan(order, bounds, packed)


def take_rows(batch: TrainBatch, rows: Sequence[int]) -> TrainBatch:
    """The batch with its rows in the order ``rows`` (every field, the same width)."""
    import torch

    index = torch.tensor(list(rows), dtype=torch.long, device=batch.input_ids_BT.device)
    return TrainBatch(
        input_ids_BT=batch.input_ids_BT.index_select(0, index),
        attention_mask_BT=batch.attention_mask_BT.index_select(0, index),
        loss_mask_BT=batch.loss_mask_BT.index_select(0, index),
        inference_logprobs_BT=batch.inference_logprobs_BT.index_select(0, index),
        advantages_BT=batch.advantages_BT.index_select(0, index),
    )


def packed_inputs(batch: TrainBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A right-padded micro-batch laid end to end: ``input_ids`` [1, N] and ``position_ids`` [1, N] (0 at
    each sequence's start), the packed positions that predict the loss tokens [K], and the [B, T] mask of
    those loss tokens (position t is predicted from position t - 1 of the same sequence)."""
    import torch

    real_BT = batch.attention_mask_BT.bool()
    lengths_B = real_BT.sum(dim=1)  # [B]
    width = real_BT.shape[1]
    input_ids_1N = batch.input_ids_BT[real_BT].unsqueeze(0)  # row by row: right padding keeps each prefix
    columns_T = torch.arange(width, device=real_BT.device)
    position_ids_1N = columns_T.expand_as(real_BT)[real_BT].unsqueeze(0)
    offsets_B = torch.cumsum(lengths_B, dim=0) - lengths_B  # where each sequence starts in the packed row
    targets_BT = batch.loss_mask_BT.bool() & real_BT & (columns_T > 0)  # position 0 has no prediction
    predicting_K = (offsets_B.unsqueeze(1) + columns_T - 1)[targets_BT]  # [K]
    return input_ids_1N, position_ids_1N, predicting_K, targets_BT
