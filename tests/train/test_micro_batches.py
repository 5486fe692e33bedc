"""Micro-batches by token budget (``optim.micro_batch_tokens``): the plan, by hand; the step's loss and
gradients against the padded path for every loss type; the packed forward against the padded one."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

import torch
from transformers import AutoModelForCausalLM

from rubrics.types import TokenSequence
from tests.train.runs import run_config
from train.batching import collate
from train.config_files import ConfigError, load_config
from train.forward import forward_logprobs, packed_forward_logprobs
from train.micro_batches import (
    loaded_attn_implementation,
    packed_inputs,
    packs_sequences,
    plan_micro_batches,
)
from train.step import train_step

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs/train/tiny_test.yaml"


def test_fixed_count_keeps_the_order() -> None:
    plan = plan_micro_batches([5, 9, 3, 9, 2], micro_batch_size=2, micro_batch_tokens=0)
    assert (plan.order, plan.bounds, plan.packed) == ([0, 1, 2, 3, 4], [(0, 2), (2, 4), (4, 5)], False)


def test_token_budget_groups_by_length_padded() -> None:
    # longest first, ties in batch order: rows 1 (9), 3 (9), 0 (5), 2 (3), 4 (2)
    # budget 20: 9; 2 x 9 = 18; 3 x 9 = 27 > 20, cut | 5; 2 x 5 = 10; 3 x 5 = 15  -> [1, 3] [0, 2, 4]
    plan = plan_micro_batches([5, 9, 3, 9, 2], 2, micro_batch_tokens=20)
    assert (plan.order, plan.bounds) == ([1, 3, 0, 2, 4], [(0, 2), (2, 5)])
    # budget 14: 9; 18 > 14 cut | 9; 18 cut | 5; 10; 15 > 14 cut | 2  -> [1] [3] [0, 2] [4]
    assert plan_micro_batches([5, 9, 3, 9, 2], 2, 14).bounds == [(0, 1), (1, 2), (2, 4), (4, 5)]


def test_token_budget_packed_counts_the_tokens_themselves() -> None:
    # budget 14, sums: 9; 9 + 9 = 18 > 14 cut | 9; 9 + 5 = 14; 14 + 3 = 17 cut | 3; 3 + 2 = 5  -> [1] [3, 0] [2, 4]
    plan = plan_micro_batches([5, 9, 3, 9, 2], 2, 14, packed=True)
    assert (plan.order, plan.bounds, plan.packed) == ([1, 3, 0, 2, 4], [(0, 1), (1, 3), (3, 5)], True)


def test_a_row_over_the_budget_is_a_micro_batch_of_its_own() -> None:
    assert plan_micro_batches([30, 4, 4], 2, 10).bounds == [(0, 1), (1, 3)]
    assert plan_micro_batches([], 2, 10).bounds == []


def test_packing_only_under_a_budget_with_flash_attention(tiny_model_dir: Path) -> None:
    assert packs_sequences("flash_attention_2", 1024)
    assert not packs_sequences("flash_attention_2", 0)  # a fixed count never packs
    assert not packs_sequences("sdpa", 1024) and not packs_sequences("eager", 1024)
    # what the step reads is the kernel the model was loaded with: on a CPU, sdpa, so no packing
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa")
    assert loaded_attn_implementation(model) == "sdpa"
    assert loaded_attn_implementation(torch.nn.Linear(2, 2)) is None


def test_bad_budgets_are_refused_with_the_field() -> None:
    with pytest.raises(
        ConfigError, match=r"optim\.micro_batch_tokens \(100\) is below env\.max_total_tokens"
    ):
        load_config(TINY, ["optim.micro_batch_tokens=100"])  # max_total_tokens 256
    with pytest.raises(ConfigError, match=r"optim\.micro_batch_tokens: loss\.type 'bnpo'"):
        load_config(TINY, ["optim.micro_batch_tokens=512", "loss.type=bnpo"])
    with pytest.raises(ConfigError, match=r"optim\.micro_batch_tokens"):
        load_config(TINY, ["optim.micro_batch_tokens=-1"])
    assert load_config(TINY).optim.micro_batch_tokens == 0


# six sequences of 20, 7, 13, 20, 5 and 11 tokens: a prompt, model tokens, an environment token, model tokens
LENGTHS = [20, 7, 13, 20, 5, 11]


def _sequences() -> list[TokenSequence]:
    g = torch.Generator().manual_seed(0)
    out = []
    for n in LENGTHS:
        mask = [0] * 3 + [1] * (n - 3)
        mask[n // 2] = 0  # an environment token inside the rollout
        logprobs = (-torch.rand(n, generator=g) * 3).tolist()  # the engine's: IS weights differ from 1
        out.append(
            TokenSequence(
                ids=torch.randint(3, 200, (n,), generator=g).tolist(),
                loss_mask=mask,
                logprobs=logprobs,
            )
        )
    return out


def _step(
    model_dir: Path,
    tmp: Path,
    loss_type: str,
    beta: float,
    *overrides: str,
    sequences: list[TokenSequence] | None = None,
) -> tuple[dict[str, float], dict[str, Any]]:
    """One step with plain SGD at learning rate 1 (no clipping): the weights move by exactly -gradient."""
    from accelerate import Accelerator

    cfg = run_config(
        "tiny_test.yaml",
        model_dir,
        tmp,
        "env.max_total_tokens=32",
        f"loss.type={loss_type}",
        f"loss.beta={beta}",
        "loss.max_completion_length=16",
        "optim.max_grad_norm=1.0e9",
        "rollout.group_size=3",
        *overrides,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ref = copy.deepcopy(model).eval().requires_grad_(False) if beta > 0 else None
    with torch.no_grad():  # a reference that differs from the policy, so that the KL term has a gradient
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    accelerator = Accelerator(cpu=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    advantages = [1.0, -0.5, 0.25, -1.0, 2.0, -0.75]
    batch = collate(sequences or _sequences(), advantages, [False] * 6, pad_token_id=0)
    out = train_step(model, ref, batch, cfg, accelerator, optimizer, scheduler)
    grads = {n: before[n] - p.detach() for n, p in model.named_parameters()}
    return out, grads


@pytest.mark.parametrize(
    ("loss_type", "beta"), [("dapo", 0.0), ("grpo", 0.0), ("dr_grpo", 0.0), ("dapo", 0.1)]
)
def test_token_budget_gives_the_padded_step(
    tiny_model_dir: Path, tmp_path: Path, loss_type: str, beta: float
) -> None:
    """The whole step in one pass, in fixed pairs, and by a 40-token budget: one loss, one gradient."""
    one, one_grads = _step(tiny_model_dir, tmp_path / "one", loss_type, beta, "optim.micro_batch_size=6")
    pairs, pair_grads = _step(tiny_model_dir, tmp_path / "pairs", loss_type, beta, "optim.micro_batch_size=2")
    budget, budget_grads = _step(
        tiny_model_dir, tmp_path / "budget", loss_type, beta, "optim.micro_batch_tokens=40"
    )
    # lengths longest first: 20 20 13 11 7 5. Budget 40: 20; 2 x 20 = 40; 3 x 20 = 60, cut | 13; 2 x 13 = 26;
    # 3 x 13 = 39; 4 x 13 = 52, cut | 5 -> [20, 20] [13, 11, 7] [5]: 40 + 39 + 5 = 84 positions.
    # Fixed pairs in order: [20, 7] [13, 20] [5, 11]: 40 + 40 + 22 = 102; one pass: 6 x 20 = 120.
    assert (budget["micro_batches"], budget["padded_tokens"]) == (3.0, 84.0)
    assert (pairs["micro_batches"], pairs["padded_tokens"]) == (3.0, 102.0)
    assert (one["micro_batches"], one["padded_tokens"]) == (1.0, 120.0)
    passes = 2 if beta > 0 else 1  # the policy, and the reference with a KL term; never an old-logprobs pass
    assert budget["forwards"] == 3 * passes and one["forwards"] == passes
    # loss tokens: n - 3 model tokens less the environment token at n // 2, which for n = 5 falls in the
    # prompt: 16 + 3 + 9 + 16 + 2 + 7 = 53
    assert one["loss_tokens"] == pairs["loss_tokens"] == budget["loss_tokens"] == 53.0
    assert abs(one["loss"]) > 1e-4  # not a comparison of zeros
    for got in (pairs, budget):
        assert got["loss"] == pytest.approx(one["loss"], rel=1e-5, abs=1e-7)
        assert got["entropy"] == pytest.approx(one["entropy"], rel=1e-5)
        if beta > 0:
            assert got["kl/mean"] == pytest.approx(one["kl/mean"], rel=1e-4) and one["kl/mean"] > 0
    total = sum(float(g.abs().sum()) for g in one_grads.values())
    assert total > 1e-3
    for grads in (pair_grads, budget_grads):
        for name, grad in grads.items():
            assert torch.allclose(grad, one_grads[name], rtol=1e-4, atol=1e-7), name


@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_shared_prompts_give_the_same_step(tiny_model_dir: Path, tmp_path: Path, beta: float) -> None:
    """``optim.share_prefix``: two groups of three replies, each micro-batch one group, each prompt run once
    for its replies (the reference's too): the loss, entropy, KL and gradients of the step that runs every
    reply whole, and the positions it saves."""
    sequences = _sequences()
    for row in (1, 2, 4, 5):  # each group's replies answer its first row's 3-token prompt
        sequences[row].ids[:3] = sequences[3 * (row // 3)].ids[:3]
    common = ("optim.micro_batch_size=3",)
    whole, whole_grads = _step(tiny_model_dir, tmp_path / "w", "dapo", beta, *common, sequences=sequences)
    shared, shared_grads = _step(
        tiny_model_dir, tmp_path / "s", "dapo", beta, *common, "optim.share_prefix=true", sequences=sequences
    )
    passes = 2 if beta > 0 else 1
    # lengths [20, 7, 13] and [20, 5, 11]: 3 x 20 twice whole. Shared: the 7-token reply's environment token
    # is its first after the prompt, so its first loss token is the 5th and it runs alone: 3 + 2 x 17 + 20;
    # then 3 + 3 x 17; two calls per shared prompt, one for the reply alone
    assert (whole["forwards"], whole["padded_tokens"]) == (2.0 * passes, 120.0)
    assert (shared["forwards"], shared["padded_tokens"]) == (5.0 * passes, 111.0)
    assert abs(whole["loss"]) > 1e-4
    for key in ("loss", "entropy", "loss_tokens") + (("kl/mean",) if beta > 0 else ()):
        assert shared[key] == pytest.approx(whole[key], rel=1e-4, abs=1e-7), key
    for name, grad in shared_grads.items():
        assert torch.allclose(grad, whole_grads[name], rtol=1e-4, atol=1e-6), name


def test_shared_prompts_are_refused_with_checkpointing(tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"optim\.share_prefix: not with model\.gradient_checkpointing"):
        run_config(
            "tiny_test.yaml",
            tiny_model_dir,
            tmp_path,
            "optim.share_prefix=true",
            "model.gradient_checkpointing=true",
        )


def test_packed_inputs_by_hand() -> None:
    long = TokenSequence(ids=[5, 6, 7, 8], loss_mask=[0, 0, 1, 1], logprobs=[0.0] * 4)
    short = TokenSequence(ids=[9, 10, 11], loss_mask=[0, 1, 0], logprobs=[0.0] * 3)
    ids, positions, predicting, targets = packed_inputs(collate([long, short], [1.0, 1.0], [False] * 2, 0))
    assert ids.tolist() == [[5, 6, 7, 8, 9, 10, 11]] and positions.tolist() == [[0, 1, 2, 3, 0, 1, 2]]
    # loss tokens 7, 8 (packed 2, 3: predicted from 1, 2) and 10 (packed 5, predicted from 4)
    assert predicting.tolist() == [1, 2, 4]
    assert targets.tolist() == [[False, False, True, True], [False, True, False, False]]


@pytest.mark.parametrize("chunk_tokens", [0, 5])
def test_packed_forward_gives_the_padded_logprobs_and_gradients(
    tiny_model_dir: Path, chunk_tokens: int
) -> None:
    """Run here through sdpa, which transformers gives a block-diagonal mask from the restarting
    ``position_ids`` (on a GPU flash-attention reads the same boundaries): the packing itself is checked."""
    model = AutoModelForCausalLM.from_pretrained(
        tiny_model_dir, dtype=torch.float32, attn_implementation="sdpa"
    )
    batch = collate(_sequences(), [1.0] * 6, [False] * 6, pad_token_id=0)
    weights_BT = torch.randn(batch.input_ids_BT.shape, generator=torch.Generator().manual_seed(1))

    def run(forward: Any) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad()
        logprobs, entropy = forward(model, batch, 0.7, chunk_tokens=chunk_tokens)
        (logprobs * batch.loss_mask_BT * weights_BT).sum().backward()
        return logprobs.detach(), entropy, {n: p.grad.clone() for n, p in model.named_parameters()}

    padded_lp, padded_ent, padded_grads = run(forward_logprobs)
    packed_lp, packed_ent, packed_grads = run(packed_forward_logprobs)
    mask = batch.loss_mask_BT.bool()
    assert torch.allclose(packed_lp[mask], padded_lp[mask], atol=1e-5)
    assert torch.all(packed_lp[~mask] == 0) and float(padded_lp[mask].abs().sum()) > 0
    assert torch.allclose(packed_ent[mask], padded_ent[mask], atol=1e-4)
    for name, grad in packed_grads.items():
        want = padded_grads[name]  # float32 sums in another order: to a few millionths of the largest entry
        assert torch.allclose(grad, want, rtol=1e-4, atol=2e-6 * float(want.abs().max())), name


def test_a_run_by_token_budget_takes_the_same_first_step(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The trainer end to end: the first step's rollouts are the same with and without a budget (same seed,
    sampled before any update), so its loss is too, up to float rounding; the pass counts are logged."""
    from tests.train.runs import metrics
    from train.trainer import train

    common = ["max_steps=1", "env.eval_fraction=0", "logging.wandb_mode=disabled"]
    train(run_config("tiny_test.yaml", tiny_model_dir, tmp_path / "fixed", *common))
    train(
        run_config(
            "tiny_test.yaml", tiny_model_dir, tmp_path / "budget", *common, "optim.micro_batch_tokens=256"
        )
    )
    (fixed,) = [r for r in metrics(tmp_path / "fixed") if "train/loss" in r]
    (budget,) = [r for r in metrics(tmp_path / "budget") if "train/loss" in r]
    assert fixed["train/loss_tokens"] == budget["train/loss_tokens"] > 0
    assert budget["train/loss"] == pytest.approx(fixed["train/loss"], rel=1e-5, abs=1e-7)
    # 8 rollouts: by four, two passes; by budget, at least one; each pass the only forward (no KL term)
    assert fixed["train/micro_batches"] == fixed["train/forwards"] == 2.0
    assert budget["train/micro_batches"] == budget["train/forwards"] >= 1.0
    # each pass holds at most 256 padded positions (every sequence fits: env.max_total_tokens is 256)
    assert 0 < budget["train/padded_tokens"] <= 256 * budget["train/micro_batches"]


@pytest.mark.slow
def test_two_steps_by_token_budget_under_ddp(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Two CPU processes over gloo, each planning its own micro-batches: every process runs as many as the
    busiest one, so the gradient collectives pair up whatever the grouping."""
    from tests.train.test_distributed import _check_run, _launch

    out = tmp_path / "ddp"
    proc = _launch("multi_process.yaml", tiny_model_dir, out, "optim.micro_batch_tokens=256")
    steps = _check_run(proc, tiny_model_dir, out)
    assert all(
        r["train/micro_batches"] >= 1 and r["train/forwards"] == r["train/micro_batches"] for r in steps
    )


@pytest.mark.slow
def test_shared_prompts_under_ddp_average_the_same_gradient(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Two CPU processes over gloo, each micro-batch one group: with ``optim.share_prefix`` two forwards feed
    each backward, and DDP still averages the gradient: the first step's loss and averaged gradient norm are
    those of the run without it (a process's own gradient would have another norm). Later weights are not
    compared: AdamW's first steps turn rounding in near-zero gradients into whole learning-rate steps."""
    from tests.train.test_distributed import _check_run, _launch

    steps = {}
    for share in ("false", "true"):
        out = tmp_path / f"share_{share}"
        proc = _launch("multi_process.yaml", tiny_model_dir, out, f"optim.share_prefix={share}")
        steps[share] = _check_run(proc, tiny_model_dir, out)
    whole, shared = steps["false"][0], steps["true"][0]  # step 1: the same rollouts from the same weights
    assert (
        shared["train/forwards"] == 2 * whole["train/forwards"]
    )  # each micro-batch: its prompt, its replies
    assert shared["train/padded_tokens"] < whole["train/padded_tokens"]
    for key in ("reward/mean", "train/loss", "train/entropy", "train/grad_norm"):
        assert shared[key] == pytest.approx(whole[key], rel=1e-4, abs=1e-7), key
