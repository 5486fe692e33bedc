"""The forward pass of a training step: logits only where the loss needs them, same logprobs."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

import torch
from transformers import AutoModelForCausalLM

from train.batching import collate
from train.loss import token_entropy, token_logprobs
from train.step import forward_logprobs


def test_logits_to_keep_gives_the_same_logprobs_on_loss_tokens(tiny_model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    # two sequences: 5 and 3 prompt tokens, then model tokens (mask 1), an env token (mask 0), model tokens
    seqs = [
        {
            "ids": [5, 6, 7, 8, 9, 10, 11, 12, 13, 14],
            "loss_mask": [0, 0, 0, 0, 0, 1, 1, 0, 1, 1],
            "logprobs": [0.0] * 10,
        },
        {"ids": [20, 21, 22, 23, 24, 25], "loss_mask": [0, 0, 0, 1, 1, 1], "logprobs": [0.0] * 6},
    ]
    batch = collate(seqs, [1.0, -1.0], [False, False], pad_token_id=0)
    with torch.no_grad():
        got_lp, got_ent = forward_logprobs(model, batch, temperature=0.7)
        full = model(input_ids=batch.input_ids_BT, attention_mask=batch.attention_mask_BT).logits
        want_lp = token_logprobs(full, batch.input_ids_BT, 0.7)
        want_ent = token_entropy(full, 0.7)
    mask = batch.loss_mask_BT.bool()
    assert got_lp.shape == want_lp.shape == (2, 10)
    assert torch.allclose(got_lp[mask], want_lp[mask], atol=1e-5)
    assert torch.allclose(got_ent[mask], want_ent[mask], atol=1e-4)
    # the first loss column is 3 (second sequence): positions before it were never computed
    assert torch.all(got_lp[:, :3] == 0)
    # the reference model of the KL term runs the same way, without the entropy
    with torch.no_grad():
        ref_lp, no_entropy = forward_logprobs(model, batch, temperature=0.7, entropy=False)
    assert no_entropy is None and torch.equal(ref_lp, got_lp)
