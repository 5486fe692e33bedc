"""Scored groups of rollouts -> the ``TrainBatch`` of one optimiser step (right-padded, micro-batchable)."""

from __future__ import annotations

from collections.abc import Sequence

from envs.rollout import ScoredRollout
from rubrics.types import TokenSequence
from train.types import RolloutGroup, TrainBatch


def collate(
    sequences: Sequence[TokenSequence],
    advantages_B: Sequence[float | Sequence[float]],
    truncated_B: Sequence[bool],
    pad_token_id: int,
    mask_truncated: bool = False,
) -> TrainBatch:
    """Right-pad token sequences (their ``ids``, ``loss_mask`` and ``logprobs``) into one batch. Each
    sequence's advantage is one number for all its tokens, or one per token (credit per reply). With
    ``mask_truncated`` the loss mask of a truncated sequence is all 0 (TRL's
    ``mask_truncated_completions``)."""
    import torch

    if not sequences:
        raise ValueError("collate: no sequences")
    width = max(len(s.ids) for s in sequences)
    b = len(sequences)
    input_ids_BT = torch.full((b, width), pad_token_id, dtype=torch.long)
    attention_mask_BT = torch.zeros((b, width), dtype=torch.long)
    loss_mask_BT = torch.zeros((b, width), dtype=torch.float32)
    inference_logprobs_BT = torch.zeros((b, width), dtype=torch.float32)
    advantages_BT = torch.zeros((b, width), dtype=torch.float32)
    for i, (seq, advantage) in enumerate(zip(sequences, advantages_B, strict=True)):
        n = len(seq.ids)
        input_ids_BT[i, :n] = torch.tensor(seq.ids, dtype=torch.long)
        attention_mask_BT[i, :n] = 1
        if not (mask_truncated and truncated_B[i]):
            loss_mask_BT[i, :n] = torch.tensor(seq.loss_mask, dtype=torch.float32)
        inference_logprobs_BT[i, :n] = torch.tensor(seq.logprobs, dtype=torch.float32)
        if isinstance(advantage, int | float):
            advantages_BT[i] = advantage  # the whole row, padding too, as broadcasting one number would
        else:
            advantages_BT[i, :n] = torch.tensor(list(advantage), dtype=torch.float32)
    return TrainBatch(
        input_ids_BT=input_ids_BT,
        attention_mask_BT=attention_mask_BT,
        loss_mask_BT=loss_mask_BT,
        inference_logprobs_BT=inference_logprobs_BT,
        advantages_BT=advantages_BT,
    )


def rollouts_to_batch(
    groups: Sequence[RolloutGroup], pad_token_id: int, mask_truncated: bool = False
) -> TrainBatch | None:
    """The trainable rollouts of the kept groups (errored ones and ones without a sequence are left out) as
    one batch, each with the advantage scoring gave it (``ScoredRollout.advantage``, or per reply
    ``ScoredRollout.reply_advantages``); None if none. A group not kept for training is an error: pass
    ``StepRollouts.kept_groups``."""
    sequences, advantages_B, truncated_B = [], [], []
    for group in groups:
        if not group.kept:
            raise ValueError("rollouts_to_batch: a group dropped from training was passed (use kept_groups)")
        for rollout in group.trained:
            if rollout.error or rollout.sequence is None:
                continue
            sequences.append(rollout.sequence)
            advantages_B.append(
                token_advantages(rollout) if rollout.reply_advantages is not None else rollout.advantage
            )
            truncated_B.append(rollout.is_truncated)
    if not sequences:
        return None
    return collate(sequences, advantages_B, truncated_B, pad_token_id, mask_truncated)


def token_advantages(rollout: ScoredRollout) -> list[float]:
    """[T] the advantage of each token of ``rollout.sequence``: each reply's tokens carry that reply's
    ``rollout.reply_advantages`` entry, every other token 0.0 (it is off the loss mask)."""
    sequence, advantages = rollout.sequence, rollout.reply_advantages
    if sequence is None or advantages is None:
        raise ValueError("token_advantages: the rollout has no sequence or no reply advantages")
    spans = sequence.replies
    if len(spans) != len(advantages):
        raise ValueError(f"{len(advantages)} reply advantages for a sequence of {len(spans)} replies")
    out = [0.0] * len(sequence.ids)
    for (start, end), advantage in zip(spans, advantages, strict=True):
        out[start:end] = [advantage] * (end - start)
    return out
