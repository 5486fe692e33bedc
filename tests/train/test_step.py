"""The forward pass of a training step: logits only where the loss needs them, same logprobs."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

import torch
from transformers import AutoModelForCausalLM

from rubrics.types import TokenSequence
from train.batching import collate
from train.forward import PrefixCluster, forward_cost, forward_logprobs, prefix_clusters
from train.loss import token_entropy, token_logprobs


def test_logits_to_keep_gives_the_same_logprobs_on_loss_tokens(tiny_model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    # two sequences: 5 and 3 prompt tokens, then model tokens (mask 1), an env token (mask 0), model tokens
    seqs = [
        TokenSequence(
            ids=[5, 6, 7, 8, 9, 10, 11, 12, 13, 14],
            loss_mask=[0, 0, 0, 0, 0, 1, 1, 0, 1, 1],
            logprobs=[0.0] * 10,
        ),
        TokenSequence(ids=[20, 21, 22, 23, 24, 25], loss_mask=[0, 0, 0, 1, 1, 1], logprobs=[0.0] * 6),
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


@pytest.mark.parametrize("chunk_tokens", [1, 6, 1024])
def test_chunked_output_head_gives_the_same_logprobs_and_gradients(
    tiny_model_dir: Path, chunk_tokens: int
) -> None:
    """The head run a few positions at a time under checkpointing: same values, same gradients, the
    entropies too; micro-batches with no loss token still run."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    seqs = [
        TokenSequence(
            ids=list(range(5, 17)), loss_mask=[0] * 4 + [1] * 5 + [0] + [1] * 2, logprobs=[0.0] * 12
        ),
        TokenSequence(ids=list(range(30, 38)), loss_mask=[0] * 3 + [1] * 5, logprobs=[0.0] * 8),
    ]
    batch = collate(seqs, [1.0, -1.0], [False, False], pad_token_id=0)
    weights = torch.randn(batch.input_ids_BT.shape)

    def run(chunk: int) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad()
        logprobs, entropy = forward_logprobs(model, batch, temperature=0.7, chunk_tokens=chunk)
        (logprobs * batch.loss_mask_BT * weights).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return logprobs.detach(), entropy, grads

    plain_lp, plain_ent, plain_grads = run(0)
    lp, ent, grads = run(chunk_tokens)
    assert torch.allclose(lp, plain_lp, atol=1e-5)
    assert torch.allclose(ent, plain_ent, atol=1e-4)
    assert grads.keys() == plain_grads.keys() and len(grads) > 3
    for name, grad in grads.items():
        assert torch.allclose(grad, plain_grads[name], rtol=1e-4, atol=1e-4), name  # sums in another order
    assert float(plain_lp.abs().sum()) > 0  # the comparison is not between zeros

    for ids in ([5, 6, 7], [5]):  # no loss token; a one-token micro-batch (the padding one of a step)
        empty = collate(
            [TokenSequence(ids=ids, loss_mask=[0] * len(ids), logprobs=[0.0] * len(ids))], [0.0], [False], 0
        )
        plain_empty, _ = forward_logprobs(model, empty, temperature=1.0)
        lp_empty, _ = forward_logprobs(model, empty, temperature=1.0, chunk_tokens=chunk_tokens)
        assert lp_empty.shape == (1, len(ids)) and torch.allclose(lp_empty, plain_empty, atol=1e-5)


def test_policy_forward_keeps_autocast_logits_with_the_same_logprobs_and_gradients(
    tiny_model_dir: Path,
) -> None:
    """Under bf16 mixed precision accelerate casts the forward's outputs to float32; the policy drops that
    cast (``train.policy.keep_autocast_outputs``): bf16 logits, and exactly the logprobs, entropies and
    weight gradients of the float32-cast forward."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    from train.policy import keep_autocast_outputs

    seqs = [
        TokenSequence(ids=list(range(5, 17)), loss_mask=[0] * 4 + [1] * 8, logprobs=[0.0] * 12),
        TokenSequence(ids=list(range(30, 38)), loss_mask=[0] * 3 + [1] * 5, logprobs=[0.0] * 8),
    ]
    batch = collate(seqs, [1.0, -1.0], [False, False], pad_token_id=0)
    results = []
    for drop in (False, True):
        AcceleratorState._reset_state()
        GradientState._reset_state()
        accelerator = Accelerator(cpu=True, mixed_precision="bf16")
        model = accelerator.prepare(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32))
        if drop:
            assert keep_autocast_outputs(model)
            assert not keep_autocast_outputs(model)  # nothing left to drop
        out = model(input_ids=batch.input_ids_BT, attention_mask=batch.attention_mask_BT).logits
        assert out.dtype == (torch.bfloat16 if drop else torch.float32)
        lp, ent = forward_logprobs(model, batch, temperature=0.7)
        (lp * batch.loss_mask_BT).sum().backward()
        results.append((lp, ent, [p.grad for p in model.parameters()]))
    AcceleratorState._reset_state()
    GradientState._reset_state()
    (want_lp, want_ent, want_grads), (got_lp, got_ent, got_grads) = results
    assert torch.equal(got_lp, want_lp) and got_ent is not None and want_ent is not None
    assert torch.equal(got_ent, want_ent)
    assert all(torch.equal(g, w) for g, w in zip(got_grads, want_grads, strict=True))


def _two_groups_and_a_stray() -> list[TokenSequence]:
    """Replies of two prompts (5 and 3 tokens; one reply with an environment token between its model
    tokens, one whose model tokens end the row early), a reply alone with its prompt, a row without a loss
    token, and a reply whose one model token ends its row."""
    a, b = [5, 6, 7, 8, 9], [20, 21, 22]
    rows = [
        ([*a, 10, 11, 12, 13], [0] * 5 + [1, 1, 0, 1]),
        ([*a, 14, 15], [0] * 5 + [1, 1]),
        ([*b, 30, 31, 32, 33, 34, 35], [0] * 3 + [1] * 6),
        ([*a, 16, 17, 18, 19, 40, 41], [0] * 5 + [1] * 6),
        ([50, 51, 52, 53], [0, 0, 1, 1]),
        ([*b, 36, 37], [0] * 3 + [1, 1]),
        ([60, 61, 62], [0, 0, 0]),
        ([*b, 38], [0] * 3 + [1]),
    ]
    return [TokenSequence(ids=ids, loss_mask=mask, logprobs=[0.0] * len(ids)) for ids, mask in rows]


def test_prefix_clusters_group_the_rows_by_their_prompt() -> None:
    batch = collate(_two_groups_and_a_stray(), [1.0] * 8, [False] * 8, pad_token_id=0)
    assert batch.input_ids_BT.shape == (8, 11)
    assert prefix_clusters(batch) == [
        PrefixCluster([0, 1, 3], 5, 11),
        PrefixCluster([2, 5, 7], 3, 9),
        PrefixCluster([4, 6], 0, 11),
    ]
    # two calls per shared prompt and one for the rest; positions: 5 + 3 x 6, 3 + 3 x 6, 2 x 11
    assert forward_cost(batch, prefix_clusters(batch)) == (5, 23 + 21 + 22)
    assert forward_cost(batch, None) == (1, 88)
    alone = collate(_two_groups_and_a_stray()[4:5], [1.0], [False], pad_token_id=0)
    assert prefix_clusters(alone) == [PrefixCluster([0], 0, 4)]
    assert forward_cost(alone, prefix_clusters(alone)) == (1, 4)


@pytest.mark.parametrize("chunk_tokens", [0, 5])
def test_shared_prefix_forward_gives_the_same_logprobs_and_gradients(
    tiny_model_dir: Path, chunk_tokens: int
) -> None:
    """Each prompt run once for its replies: the logprobs, entropies and weight gradients of the forward
    that runs every row whole, in the rows' own order, with the head whole or in chunks."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    batch = collate(_two_groups_and_a_stray(), [1.0] * 8, [False] * 8, pad_token_id=0)
    clusters = prefix_clusters(batch)
    weights = torch.randn(batch.input_ids_BT.shape)

    def run(share: bool) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad()
        logprobs, entropy = forward_logprobs(
            model, batch, temperature=0.7, chunk_tokens=chunk_tokens, clusters=clusters if share else None
        )
        assert entropy is not None
        (logprobs * batch.loss_mask_BT * weights).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return logprobs.detach(), entropy.detach(), grads

    mask = batch.loss_mask_BT.bool()
    plain_lp, plain_ent, plain_grads = run(False)
    lp, ent, grads = run(True)
    assert lp.shape == plain_lp.shape == (8, 11)
    assert torch.allclose(lp[mask], plain_lp[mask], atol=1e-5)
    assert torch.allclose(ent[mask], plain_ent[mask], atol=1e-4)
    assert float(plain_lp[mask].abs().min()) > 0  # every loss token compared, none of them zero
    assert grads.keys() == plain_grads.keys() and len(grads) > 3
    for name, grad in grads.items():
        assert torch.allclose(grad, plain_grads[name], rtol=1e-4, atol=1e-5), name
    # the reference model of the KL term: no entropy, the same logprobs
    with torch.no_grad():
        ref_lp, no_entropy = forward_logprobs(model, batch, 0.7, entropy=False, clusters=clusters)
    assert no_entropy is None and torch.allclose(ref_lp[mask], plain_lp[mask], atol=1e-5)


def test_a_step_with_nothing_to_train_moves_the_schedule_without_a_warning(tiny_model_dir: Path) -> None:
    import warnings

    from accelerate import Accelerator
    from transformers import get_scheduler

    from train.config import TrainConfig
    from train.step import train_step

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = get_scheduler("linear", optimizer, num_warmup_steps=0, num_training_steps=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's "lr_scheduler.step() before optimizer.step()" would raise
        out = train_step(model, None, None, TrainConfig(), Accelerator(cpu=True), optimizer, scheduler)
    assert out["skipped"] == 1.0
    assert out["learning_rate"] == pytest.approx(0.75e-3)  # one of four linear steps taken


def test_update_check_sees_the_update_raise_positive_and_lower_negative_replies(tiny_model_dir: Path) -> None:
    """``logging.update_check``: after one step, the tokens of the reply with a positive advantage are more
    likely and those of the reply with a negative one less likely, as the loss asks; a sign flipped anywhere
    (the loss, the mask, the check) fails it."""
    from accelerate import Accelerator
    from transformers import get_scheduler

    from train.config_files import load_config
    from train.step import train_step

    rows = [
        TokenSequence(ids=[5, 6, 7, 10, 11, 12, 13], loss_mask=[0, 0, 0, 1, 1, 1, 1], logprobs=[0.0] * 7),
        TokenSequence(ids=[5, 6, 7, 20, 21, 22, 23], loss_mask=[0, 0, 0, 1, 1, 1, 1], logprobs=[0.0] * 7),
    ]
    batch = collate(rows, [1.0, -1.0], [False, False], pad_token_id=0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = get_scheduler("constant", optimizer)
    cfg = load_config(
        None, ["logging.update_check=true", "loss.importance_sampling=false", "rollout.temperature=1.0"]
    )
    out = train_step(model, None, batch, cfg, Accelerator(cpu=True), optimizer, scheduler)
    assert out["update/logp_delta_pos"] > 0 > out["update/logp_delta_neg"]
    assert out["update/right_direction_frac"] == 1.0
    off = train_step(model, None, batch, load_config(None, []), Accelerator(cpu=True), optimizer, scheduler)
    assert not any(key.startswith("update/") for key in off)  # no extra forward unless asked
