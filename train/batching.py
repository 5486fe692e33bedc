"""Scored rollouts -> the ``TrainBatch`` of one optimiser step (right-padded, micro-batchable)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rubrics.types import State
from train.types import TrainBatch


def collate(
    sequences: Sequence[dict[str, list[Any]]],
    advantages: Sequence[float],
    group_ids: Sequence[int],
    truncated: Sequence[bool],
    pad_token_id: int,
    mask_truncated: bool = False,
) -> TrainBatch:
    """Right-pad flattened sequences (``ids``, ``loss_mask``, ``logprobs``) into one batch."""
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
        if not (mask_truncated and truncated[i]):
            loss_mask_BT[i, :n] = torch.tensor(seq["loss_mask"], dtype=torch.float32)
        inference_logprobs_BT[i, :n] = torch.tensor(seq["logprobs"], dtype=torch.float32)
    return TrainBatch(
        input_ids_BT=input_ids_BT,
        attention_mask_BT=attention_mask_BT,
        loss_mask_BT=loss_mask_BT,
        inference_logprobs_BT=inference_logprobs_BT,
        advantages_B=torch.tensor(list(advantages), dtype=torch.float32),
        group_ids_B=torch.tensor(list(group_ids), dtype=torch.long),
        truncated_B=torch.tensor(list(truncated), dtype=torch.bool),
    )


def states_to_batch(
    groups: Sequence[Sequence[State]],
    advantages: Sequence[Sequence[float]],
    pad_token_id: int,
    mask_truncated: bool = False,
) -> TrainBatch | None:
    """The trainable rollouts of scored groups (errored ones are left out) as one batch; None if none."""
    sequences, advs, gids, trunc = [], [], [], []
    for g, (group, group_advs) in enumerate(zip(groups, advantages, strict=True)):
        for state, adv in zip(group, group_advs, strict=True):
            if state.get("error") or "sequence" not in state:
                continue
            sequences.append(state["sequence"])
            advs.append(adv)
            gids.append(g)
            trunc.append(bool(state.get("is_truncated", False)))
    if not sequences:
        return None
    return collate(sequences, advs, gids, trunc, pad_token_id, mask_truncated)
