"""Scored groups -> the ``TrainBatch`` of one optimiser step (right-padded, micro-batchable)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rubrics.types import ScoredGroup
from train.types import TrainBatch


def collate(
    sequences: Sequence[dict[str, list[Any]]],
    advantages_B: Sequence[float],
    truncated_B: Sequence[bool],
    pad_token_id: int,
    mask_truncated: bool = False,
) -> TrainBatch:
    """Right-pad flattened sequences (``ids``, ``loss_mask``, ``logprobs``) into one batch. With
    ``mask_truncated`` the loss mask of a truncated sequence is all 0 (TRL's ``mask_truncated_completions``)."""
    import torch

    if not sequences:
        raise ValueError("collate: no sequences")
    width = max(len(s["ids"]) for s in sequences)
    b = len(sequences)
    input_ids_BT = torch.full((b, width), pad_token_id, dtype=torch.long)
    attention_mask_BT = torch.zeros((b, width), dtype=torch.long)
    loss_mask_BT = torch.zeros((b, width), dtype=torch.float32)
    inference_logprobs_BT = torch.zeros((b, width), dtype=torch.float32)
    for i, seq in enumerate(sequences):
        n = len(seq["ids"])
        input_ids_BT[i, :n] = torch.tensor(seq["ids"], dtype=torch.long)
        attention_mask_BT[i, :n] = 1
        if not (mask_truncated and truncated_B[i]):
            loss_mask_BT[i, :n] = torch.tensor(seq["loss_mask"], dtype=torch.float32)
        inference_logprobs_BT[i, :n] = torch.tensor(seq["logprobs"], dtype=torch.float32)
    return TrainBatch(
        input_ids_BT=input_ids_BT,
        attention_mask_BT=attention_mask_BT,
        loss_mask_BT=loss_mask_BT,
        inference_logprobs_BT=inference_logprobs_BT,
        advantages_B=torch.tensor(list(advantages_B), dtype=torch.float32),
    )


def states_to_batch(
    groups: Sequence[ScoredGroup], pad_token_id: int, mask_truncated: bool = False
) -> TrainBatch | None:
    """The trainable rollouts of the kept groups (errored ones and ones without a sequence are left out) as
    one batch, each with the advantage scoring wrote (``state["advantage"]``); None if none. A group not kept for training is an error: pass ``StepRollouts.kept_groups``."""
    sequences, advantages_B, truncated_B = [], [], []
    for group in groups:
        if not group.kept:
            raise ValueError("states_to_batch: a group dropped from training was passed (use kept_groups)")
        for state in group.states:
            if state.get("error") or "sequence" not in state:
                continue
            sequences.append(state["sequence"])
            advantages_B.append(state["advantage"])
            truncated_B.append(bool(state.get("is_truncated", False)))
    if not sequences:
        return None
    return collate(sequences, advantages_B, truncated_B, pad_token_id, mask_truncated)
