"""Scored groups -> ``TrainBatch``: hand-checked tensors."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from rubrics.types import TokenSequence  # noqa: E402
from tests.support.rollouts import scored  # noqa: E402
from train.batching import collate, rollouts_to_batch  # noqa: E402
from train.types import RolloutGroup  # noqa: E402

# two sequences: 4 tokens (prompt 2, model 2) and 3 tokens (prompt 1, model 1, environment 1)
LONG = TokenSequence(ids=[5, 6, 7, 8], loss_mask=[0, 0, 1, 1], logprobs=[0.0, 0.0, -0.5, -1.0])
SHORT = TokenSequence(ids=[9, 10, 11], loss_mask=[0, 1, 0], logprobs=[0.0, -0.25, 0.0])


def test_collate_right_pads_and_keeps_masks_without_mask_truncated() -> None:
    # the short sequence is truncated, but mask_truncated is off: its loss mask stays [0, 1, 0] (+ pad 0)
    batch = collate([LONG, SHORT], [0.5, -0.5], [False, True], pad_token_id=0)
    assert torch.equal(batch.input_ids_BT, torch.tensor([[5, 6, 7, 8], [9, 10, 11, 0]]))
    assert torch.equal(batch.attention_mask_BT, torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]))
    assert torch.equal(batch.loss_mask_BT, torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0]]))
    assert torch.equal(
        batch.inference_logprobs_BT, torch.tensor([[0.0, 0.0, -0.5, -1.0], [0.0, -0.25, 0.0, 0.0]])
    )
    # one advantage per sequence: on every column of its row, padding included (as broadcasting it would be)
    assert torch.equal(batch.advantages_BT, torch.tensor([[0.5] * 4, [-0.5] * 4]))
    assert (batch.input_ids_BT.dtype, batch.loss_mask_BT.dtype) == (torch.long, torch.float32)
    # loss tokens: 2 (long) + 1 (short) = 3
    assert (batch.num_sequences, batch.num_loss_tokens) == (2, 3)


def test_collate_zeroes_the_loss_mask_of_truncated_sequences_when_asked() -> None:
    # mask_truncated on: the truncated short sequence's loss mask becomes all 0; everything else is unchanged
    batch = collate([LONG, SHORT], [0.5, -0.5], [False, True], pad_token_id=0, mask_truncated=True)
    assert torch.equal(batch.loss_mask_BT, torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]]))
    assert torch.equal(batch.attention_mask_BT, torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]))
    assert torch.equal(batch.advantages_BT, torch.tensor([[0.5] * 4, [-0.5] * 4]))
    # loss tokens: 2 (long) + 0 (short, masked) = 2
    assert batch.num_loss_tokens == 2


def test_slice_trims_to_the_longest_real_sequence() -> None:
    # rows 1:2 hold only the short sequence: 3 real tokens, the pad column is dropped
    part = collate([LONG, SHORT], [0.5, -0.5], [False, False], pad_token_id=0).slice(1, 2)
    assert torch.equal(part.input_ids_BT, torch.tensor([[9, 10, 11]]))
    assert torch.equal(part.advantages_BT, torch.tensor([[-0.5] * 3]))


def _group(fields_G: list[dict[str, Any]], advantages_G: list[float], kept: bool = True) -> RolloutGroup:
    """Scored rollouts with ``fields_G`` and the advantages their credit gave them."""
    rollouts = [scored(**{**f, "advantage": a}) for f, a in zip(fields_G, advantages_G, strict=True)]
    return RolloutGroup(rollouts, zero_variance=False, kept=kept)


def test_rollouts_to_batch_leaves_errored_rollouts_out() -> None:
    # group 0: [LONG ok, SHORT errored]; group 1: [SHORT ok, a rollout without a sequence]
    groups = [
        _group(
            [{"sequence": LONG, "reward": 1.0}, {"sequence": SHORT, "error": "judge: timeout"}], [0.5, 0.0]
        ),
        _group([{"sequence": SHORT, "reward": 0.0, "is_truncated": True}, {"reward": 1.0}], [-0.25, 0.25]),
    ]
    batch = rollouts_to_batch(groups, pad_token_id=0)
    assert batch is not None
    # rows: LONG (group 0, advantage 0.5), SHORT (group 1, advantage -0.25); the errored SHORT is not a row
    assert torch.equal(batch.input_ids_BT, torch.tensor([[5, 6, 7, 8], [9, 10, 11, 0]]))
    assert torch.equal(batch.advantages_BT, torch.tensor([[0.5] * 4, [-0.25] * 4]))
    # the truncated flag reaches collate: with mask_truncated the second row has no loss token
    masked = rollouts_to_batch(groups, pad_token_id=0, mask_truncated=True)
    assert masked is not None and masked.num_loss_tokens == 2


def test_rollouts_to_batch_without_trainable_rollouts_and_with_dropped_groups() -> None:
    assert rollouts_to_batch([_group([{"sequence": LONG, "error": "x"}], [0.0])], pad_token_id=0) is None
    assert rollouts_to_batch([], pad_token_id=0) is None
    with pytest.raises(ValueError, match="dropped"):
        rollouts_to_batch([_group([{"sequence": LONG, "reward": 1.0}], [0.0], kept=False)], pad_token_id=0)


# a two-reply rollout: prompt [1, 2], reply [3, 4], environment [5], reply [6]
TWO_REPLIES = TokenSequence(
    ids=[1, 2, 3, 4, 5, 6],
    loss_mask=[0, 0, 1, 1, 0, 1],
    logprobs=[0.0, 0.0, -0.5, -0.5, 0.0, -1.0],
    replies=[(2, 4), (5, 6)],
)


def test_reply_advantages_go_on_their_own_replies_tokens() -> None:
    # credit per reply: 0.75 on the first reply's tokens, -1.5 on the second's, 0.0 on prompt and environment;
    # a rollout of the same batch without reply advantages keeps its one advantage on the whole row
    fields = {"sequence": TWO_REPLIES, "reward": 1.0, "reply_advantages": [0.75, -1.5]}
    batch = rollouts_to_batch(
        [_group([fields, {"sequence": SHORT, "reward": 0.0}], [0.75, -0.25])], pad_token_id=0
    )
    assert batch is not None
    assert torch.equal(batch.advantages_BT, torch.tensor([[0.0, 0.0, 0.75, 0.75, 0.0, -1.5], [-0.25] * 6]))
    assert torch.equal(batch.slice(0, 1).advantages_BT, batch.advantages_BT[:1])


def test_reply_advantages_must_match_the_replies() -> None:
    fields = {"sequence": TWO_REPLIES, "reward": 1.0, "reply_advantages": [0.75]}
    with pytest.raises(ValueError, match="1 reply advantages for a sequence of 2 replies"):
        rollouts_to_batch([_group([fields], [0.75])], pad_token_id=0)
