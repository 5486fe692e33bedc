"""The policy loss: hand-derived values (arithmetic in comments), gradients, and equality with TRL's loss."""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import train.loss  # noqa: E402
from train.config import LossConfig  # noqa: E402
from train.loss import (  # noqa: E402
    importance_weights,
    policy_loss,
    target_logprobs,
    token_entropy,
    token_logprobs,
)

LN2, LN3 = math.log(2.0), math.log(3.0)


def cfg(type_: str = "grpo", **kw: Any) -> LossConfig:
    return LossConfig(type=type_, epsilon=0.2, epsilon_high=0.28, **kw)


# ---------------------------------------------------------------------------------------------- logprobs


def test_token_logprobs_and_entropy_by_hand() -> None:
    # V = 3. logits at t=0: [0, 0, 0] -> uniform: logprob of any next token -ln 3, entropy ln 3.
    # logits at t=1: [0, ln 2, 0] -> probs [1/4, 1/2, 1/4]: token 1 has logprob ln(1/2);
    # entropy -(2 * 1/4 * ln(1/4) + 1/2 * ln(1/2)) = ln 2 + ln 2 / 2 = 1.5 ln 2.
    # The logits at the last position (t=2) predict nothing inside the sequence and are unused.
    logits_BTV = torch.tensor([[[0.0, 0.0, 0.0], [0.0, LN2, 0.0], [9.0, 9.0, 9.0]]])
    ids_BT = torch.tensor([[2, 0, 1]])
    lp = token_logprobs(logits_BTV, ids_BT)
    assert torch.allclose(lp, torch.tensor([[0.0, -LN3, -LN2]]))
    assert torch.allclose(token_entropy(logits_BTV), torch.tensor([[0.0, LN3, 1.5 * LN2]]))
    # temperature 2 at t=1: logits [0, ln 2 / 2, 0] -> weights [1, sqrt 2, 1]; token 1:
    # ln(sqrt 2 / (2 + sqrt 2)) = ln(1 / (1 + sqrt 2)) = -ln(1 + sqrt 2) = -0.881374
    lp2 = token_logprobs(logits_BTV, ids_BT, temperature=2.0)
    assert lp2[0, 2].item() == pytest.approx(-math.log(1 + math.sqrt(2)), abs=1e-6)


def test_token_logprobs_chunking_matches_full_log_softmax() -> None:
    torch.manual_seed(0)
    logits_BTV, ids_BT = torch.randn(3, 5, 7), torch.randint(0, 7, (3, 5))
    full_BTV = torch.log_softmax(logits_BTV / 0.7, dim=-1)
    want_BT = torch.zeros(3, 5)
    want_BT[:, 1:] = full_BTV[:, :-1].gather(-1, ids_BT[:, 1:, None]).squeeze(-1)
    for rows in (1, 2, 3):
        assert torch.allclose(
            token_logprobs(logits_BTV, ids_BT, 0.7, rows_per_chunk=rows), want_BT, atol=1e-6
        )
    ent_want = -(full_BTV.exp() * full_BTV).sum(-1)[:, :-1]
    assert torch.allclose(token_entropy(logits_BTV, 0.7, rows_per_chunk=2)[:, 1:], ent_want, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk_elements", [1 << 22, 25])
def test_target_logprobs_equal_the_autograd_definition_bit_for_bit(
    dtype: str, temperature: float, chunk_elements: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hand-written backward (chunks of 25 elements: a few positions at a time) gives exactly the
    logprobs, entropies and logit gradients of ``token_logprobs`` and ``token_entropy`` under autograd,
    in the logits' own dtype; the last position predicts nothing and gets a zero gradient."""
    monkeypatch.setattr(train.loss, "CHUNK_ELEMENTS", chunk_elements)
    torch.manual_seed(0)
    logits_BTV = (torch.randn(3, 6, 11) * 3).to(getattr(torch, dtype)).requires_grad_()
    ids_BT, weights_BT = torch.randint(0, 11, (3, 6)), torch.randn(3, 6)
    want_BT = token_logprobs(logits_BTV, ids_BT, temperature)
    (want_BT * weights_BT).sum().backward()
    assert logits_BTV.grad is not None
    want_grad_BTV, logits_BTV.grad = logits_BTV.grad, None
    got_BS, entropy_BS = target_logprobs(logits_BTV, ids_BT[:, 1:], temperature, entropy=True)
    (got_BS * weights_BT[:, 1:]).sum().backward()
    assert entropy_BS is not None and not entropy_BS.requires_grad
    assert torch.equal(got_BS, want_BT[:, 1:])
    assert torch.equal(entropy_BS, token_entropy(logits_BTV.detach(), temperature)[:, 1:])
    assert logits_BTV.grad is not None and logits_BTV.grad.dtype == logits_BTV.dtype
    assert torch.equal(logits_BTV.grad, want_grad_BTV)
    assert torch.all(logits_BTV.grad[:, -1] == 0)
    no_entropy = target_logprobs(logits_BTV.detach(), ids_BT[:, 1:], temperature)
    assert no_entropy[1] is None and torch.equal(no_entropy[0], got_BS)


# ---------------------------------------------------------------------------------------------- the loss

# Two sequences, T = 3, position 0 is prompt (mask 0). old logprobs -1 everywhere; ratios r set by hand.
# seq 0 (A = +1): r = [_, 1.5, 0.5]  -> t1: min(1.5, 1.28) * 1 = 1.28 (high clip)  -> loss -1.28
#                                      t2: min(0.5, 0.8) = 0.5 (low side, A > 0: unclipped) -> loss -0.5
# seq 1 (A = -1): r = [_, 0.5, pad]   -> t1: min(-0.5, -0.8) = -0.8 (low clip)      -> loss +0.8
# The padding token carries a huge log ratio (e^100): it must neither count nor turn into NaN.
OLD_BT = torch.full((2, 3), -1.0)
LOG_R_BT = torch.tensor([[0.0, math.log(1.5), math.log(0.5)], [0.0, math.log(0.5), 100.0]])
ADV_B = torch.tensor([1.0, -1.0])
MASK_BT = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])


def clip_case(type_: str, **kw: Any) -> tuple[torch.Tensor, dict[str, float]]:
    return policy_loss(OLD_BT + LOG_R_BT, OLD_BT, ADV_B, MASK_BT, cfg(type_, max_completion_length=4), **kw)


def test_grpo_is_mean_of_sequence_means() -> None:
    # seq means: (-1.28 - 0.5) / 2 = -0.89 and 0.8 / 1 = 0.8; mean over 2 sequences (-0.89 + 0.8) / 2 = -0.045
    loss, _ = clip_case("grpo")
    assert loss.item() == pytest.approx(-0.045, abs=1e-6)
    # as half of a 4-sequence step: (-0.89 + 0.8) / 4 = -0.0225
    assert clip_case("grpo", num_sequences_in_batch=4)[0].item() == pytest.approx(-0.0225, abs=1e-6)


def test_bnpo_dapo_dr_grpo_are_token_sums_over_a_count() -> None:
    # token sum -1.28 - 0.5 + 0.8 = -0.98 over 3 loss tokens
    assert clip_case("bnpo")[0].item() == pytest.approx(-0.98 / 3, abs=1e-6)
    # bnpo in half of a 4-sequence step: -0.98 / 3 * (2 / 4) = -0.163333
    assert clip_case("bnpo", num_sequences_in_batch=4)[0].item() == pytest.approx(-0.163333, abs=1e-6)
    # dapo defaults to the local tokens (3); with 7 tokens in the step: -0.98 / 7 = -0.14
    assert clip_case("dapo")[0].item() == pytest.approx(-0.98 / 3, abs=1e-6)
    assert clip_case("dapo", num_items_in_batch=7)[0].item() == pytest.approx(-0.14, abs=1e-6)
    # dr_grpo: -0.98 / (2 sequences x max_completion_length 4) = -0.1225
    assert clip_case("dr_grpo")[0].item() == pytest.approx(-0.1225, abs=1e-6)


def test_clip_and_ratio_stats() -> None:
    _, stats = clip_case("dapo")
    # low: r < 0.8 with A < 0 -> seq 1 t1 only; high: r > 1.28 with A > 0 -> seq 0 t1 only; of 3 tokens
    assert stats["clip/low_frac"] == pytest.approx(1 / 3)
    assert stats["clip/high_frac"] == pytest.approx(1 / 3)
    assert stats["clip/region_frac"] == pytest.approx(2 / 3)
    # ratios on the mask [1.5, 0.5, 0.5]: mean 2.5 / 3; the padding's e^100 is not among them
    assert stats["ratio/mean"] == pytest.approx(2.5 / 3)
    assert (stats["ratio/min"], stats["ratio/max"]) == pytest.approx((0.5, 1.5))
    assert stats["loss/tokens"] == 3.0
    assert "kl/mean" not in stats


def test_one_advantage_per_token_equals_one_per_sequence_bit_for_bit() -> None:
    # [B] advantages and the same numbers on every token of each row ([B, T]): the same loss, stats and
    # gradient, to the bit (credit per episode keeps its numbers under the per-token batch)
    for type_ in ("grpo", "dapo"):
        results = []
        for adv in (ADV_B, ADV_B.unsqueeze(1).expand(-1, OLD_BT.shape[1]).clone()):
            lp_BT = (OLD_BT + LOG_R_BT).requires_grad_()
            loss, stats = policy_loss(lp_BT, OLD_BT, adv, MASK_BT, cfg(type_))
            loss.backward()
            results.append((loss.detach(), stats, lp_BT.grad))
        (loss_a, stats_a, grad_a), (loss_b, stats_b, grad_b) = results
        assert torch.equal(loss_a, loss_b) and stats_a == stats_b
        assert grad_a is not None and grad_b is not None and torch.equal(grad_a, grad_b)


def test_each_token_takes_its_own_advantage() -> None:
    # on policy (r = 1) the dapo loss is -sum(A_t) / tokens over the mask: A = [[0, 1, -1], [0, 2, 9]] with the
    # mask [[0, 1, 1], [0, 1, 0]]: -(1 - 1 + 2) / 3; the 9 is off the mask
    lp_BT = torch.full((2, 3), -1.0)
    adv_BT = torch.tensor([[0.0, 1.0, -1.0], [0.0, 2.0, 9.0]])
    loss, _ = policy_loss(lp_BT, lp_BT, adv_BT, torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]]), cfg("dapo"))
    assert loss.item() == pytest.approx(-2 / 3)


def test_gradient_through_clipping_by_hand() -> None:
    # d(-A r)/d lp = -A r where the unclipped branch is taken, 0 where the clipped one is.
    # Only seq 0 t2 is unclipped: -1 * 0.5 = -0.5; grpo weight 1 / (2 tokens) / (2 sequences) = 1/4 -> -0.125
    lp_BT = (OLD_BT + LOG_R_BT).requires_grad_()
    loss, _ = policy_loss(lp_BT, OLD_BT, ADV_B, MASK_BT, cfg("grpo"))
    loss.backward()
    assert lp_BT.grad is not None
    assert torch.allclose(lp_BT.grad, torch.tensor([[0.0, 0.0, -0.125], [0.0, 0.0, 0.0]]))


def test_gradient_on_policy_shows_the_length_weighting() -> None:
    # On policy r = 1, loss per token -A, gradient per token -A times the normaliser's weight.
    # seq 0: A = 0.5, 2 tokens; seq 1: A = -1, 1 token (t2 is padding).
    # grpo:  seq 0: -0.5 / 2 tokens / 2 seqs = -0.125;  seq 1: +1 / 1 / 2 = 0.5
    # dapo:  every token / 3 tokens: -0.5 / 3 = -0.166667 and +1 / 3 = 0.333333
    adv_B, mask_BT = torch.tensor([0.5, -1.0]), torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    want = {"grpo": [[0, -0.125, -0.125], [0, 0.5, 0]], "dapo": [[0, -0.5 / 3, -0.5 / 3], [0, 1 / 3, 0]]}
    for type_, grad in want.items():
        lp_BT = torch.full((2, 3), -2.0, requires_grad=True)
        loss, _ = policy_loss(lp_BT, lp_BT.detach(), adv_B, mask_BT, cfg(type_))
        loss.backward()
        assert lp_BT.grad is not None
        assert torch.allclose(lp_BT.grad, torch.tensor(grad)), type_


def test_k3_kl_value_gradient_and_stat() -> None:
    # On policy with A = 0: only beta * k3 is left. ref - lp = d = [ln 2, -ln 2]:
    # k3 = e^d - d - 1 = [2 - ln 2 - 1, 0.5 + ln 2 - 1] = [0.306853, 0.193147]; their sum is exactly 0.5.
    # bnpo: 0.1 * 0.5 / 2 tokens = 0.025; kl/mean 0.25.
    # d k3 / d lp = 1 - e^d = [-1, 0.5]; times beta / 2 tokens -> [-0.05, 0.025]
    lp_BT = torch.tensor([[0.0, -1.0, -1.0]], requires_grad=True)
    ref_BT = torch.tensor([[0.0, -1.0 + LN2, -1.0 - LN2]])
    mask_BT = torch.tensor([[0.0, 1.0, 1.0]])
    loss, stats = policy_loss(lp_BT, lp_BT.detach(), torch.zeros(1), mask_BT, cfg("bnpo", beta=0.1), ref_BT)
    assert loss.item() == pytest.approx(0.025, abs=1e-6)
    assert stats["kl/mean"] == pytest.approx(0.25, abs=1e-6)
    loss.backward()
    assert lp_BT.grad is not None
    assert torch.allclose(lp_BT.grad, torch.tensor([[0.0, -0.05, 0.025]]))
    with pytest.raises(ValueError, match="ref_logprobs_BT"):
        policy_loss(lp_BT, lp_BT.detach(), torch.zeros(1), mask_BT, cfg("bnpo", beta=0.1))


def test_is_weights_scale_the_policy_term_not_the_kl() -> None:
    # one token, on policy, A = 1, IS weight 0.5, ref - lp = ln 2, beta 0.1:
    # -1 * 1 * 0.5 + 0.1 * (2 - ln 2 - 1) = -0.5 + 0.0306853 = -0.4693147
    lp_BT, mask_BT = torch.tensor([[0.0, -1.0]]), torch.tensor([[0.0, 1.0]])
    loss, _ = policy_loss(
        lp_BT,
        lp_BT,
        torch.ones(1),
        mask_BT,
        cfg("dapo", beta=0.1),
        ref_logprobs_BT=lp_BT + LN2,
        is_weights_BT=torch.tensor([[1.0, 0.5]]),
    )
    assert loss.item() == pytest.approx(-0.4693147, abs=1e-6)


def test_importance_weights_truncate_and_report_ratios_before_truncation() -> None:
    # old - inference = [ln 3, ln 0.5] on the mask -> ratios [3, 0.5]; cap 2 -> weights [2, 0.5].
    # Before truncation: mean (3 + 0.5) / 2 = 1.75, min 0.5, max 3, truncated 1 of 2.
    # Padding (log diff 50) and a NaN inference logprob off the mask both get weight 1.
    old_BT = torch.tensor([[0.0, -1.0, -1.0, -1.0, -1.0]])
    inf_BT = torch.tensor([[0.0, -1.0 - LN3, -1.0 - math.log(0.5), -51.0, float("nan")]])
    mask_BT = torch.tensor([[0.0, 1.0, 1.0, 0.0, 0.0]])
    w_BT, stats = importance_weights(old_BT, inf_BT, mask_BT, cap=2.0)
    assert torch.allclose(w_BT, torch.tensor([[1.0, 2.0, 0.5, 1.0, 1.0]]))
    assert stats == pytest.approx(
        {"is/ratio_mean": 1.75, "is/ratio_min": 0.5, "is/ratio_max": 3.0, "is/truncated_frac": 0.5}
    )


def test_a_masked_truncated_sequence_still_counts_in_grpo() -> None:
    # the mask of a truncated sequence under mask_truncated_completions (collate zeroes it, test_batching.py)
    masked = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    # grpo still counts the masked sequence in its mean (as TRL): A = [1, 1] on policy:
    # seq 0 mean -1, seq 1 nothing (0); (-1 + 0) / 2 = -0.5
    lp = torch.zeros(2, 3)
    assert policy_loss(lp, lp, torch.ones(2), masked, cfg())[0].item() == pytest.approx(-0.5)


def test_an_empty_mask_gives_zero_loss_and_no_nan() -> None:
    lp_BT = torch.zeros(2, 3, requires_grad=True)
    for type_ in ("grpo", "dr_grpo", "dapo", "bnpo"):
        loss, stats = policy_loss(lp_BT, lp_BT.detach(), torch.ones(2), torch.zeros(2, 3), cfg(type_))
        assert loss.item() == 0.0
        assert stats["clip/region_frac"] == 0.0 and stats["ratio/min"] == stats["ratio/max"] == 1.0


# ---------------------------------------------------------------------------------------------- TRL equality


class _OneProcess:
    """The accelerator calls ``_compute_loss`` makes, for one process (gather and reduce are identities)."""

    num_processes = 1

    def gather(self, x: Any) -> Any:
        return x

    def reduce(self, x: Any, reduction: str = "sum") -> Any:
        return x


def trl_loss(
    type_: str,
    lp_BC: torch.Tensor,
    inputs: dict[str, Any],
    beta: float,
    max_len: int,
    accum: int,
    tmp_path: Any,
) -> tuple[torch.Tensor, dict[str, list[float]]]:
    """Run TRL 1.16's ``GRPOTrainer._compute_loss`` on given logprobs: an instance made without ``__init__``,
    with only the attributes that method reads set (as ``__init__`` sets them from a real ``GRPOConfig``), and
    ``_get_per_token_logps_and_entropies`` replaced by one that returns ``lp_BC``."""
    trl = pytest.importorskip("trl")
    args = trl.GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        report_to=[],
        loss_type=type_,
        epsilon=0.2,
        epsilon_high=0.28,
        beta=beta,
        max_completion_length=max_len,
        gradient_accumulation_steps=accum,  # steps_per_generation defaults to this
        use_bias_correction_kl=False,  # TRL's default (True) multiplies the KL by the ratio; ours does not
    )
    t = trl.GRPOTrainer.__new__(trl.GRPOTrainer)
    t.args = args
    for name in ("loss_type", "beta", "max_completion_length", "importance_sampling_level"):
        setattr(t, name, getattr(args, name))
    for name in ("off_policy_mask_threshold", "top_entropy_quantile", "vllm_importance_sampling_correction"):
        setattr(t, name, getattr(args, name))
    t.epsilon_low, t.epsilon_high = args.epsilon, args.epsilon_high
    t.use_vllm = "importance_sampling_ratio" in inputs  # TRL applies the IS ratio only with vLLM
    t.aux_loss_enabled, t._entropy_bonus_enabled = False, False
    t.model = SimpleNamespace(training=True)
    t.current_gradient_accumulation_steps = accum
    t.accelerator = _OneProcess()
    t._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    t._get_per_token_logps_and_entropies = lambda *a, **k: (lp_BC, torch.zeros_like(lp_BC), None)
    return t._compute_loss(None, inputs), t._metrics["train"]


@pytest.mark.filterwarnings("ignore::FutureWarning")  # TRL's config warns about transformers renames
@pytest.mark.parametrize("type_", ["grpo", "dr_grpo", "dapo", "bnpo"])
@pytest.mark.parametrize("extras", [False, True], ids=["plain", "kl+is+accum"])
def test_equals_trl(type_: str, extras: bool, tmp_path: Any) -> None:
    """Same logprobs, old logprobs, advantages and masks: our loss, its gradient and its clip fractions and KL
    equal TRL's. ``extras``: beta 0.05 with reference logprobs, IS weights, and this micro-batch being one of
    two in the step (TRL: gradient_accumulation_steps=2; ours: the step's counts passed in)."""
    gen = torch.Generator().manual_seed(0)
    B, P, C, max_len = 4, 2, 6, 8  # sequences, prompt tokens, completion tokens
    lengths = [6, 3, 5, 1]  # completion lengths: right padding after
    comp_mask_BC = torch.tensor([[1.0] * n + [0.0] * (C - n) for n in lengths])
    lp_BC = -torch.rand(B, C, generator=gen) * 3
    old_BC = lp_BC + 0.3 * torch.randn(B, C, generator=gen)
    old_BC[0, :2] = lp_BC[0, :2] - 0.5  # ratio e^0.5 = 1.65 with A > 0: clipped high
    old_BC[1, :2] = lp_BC[1, :2] + 0.5  # ratio e^-0.5 = 0.61 with A < 0: clipped low
    ref_BC = lp_BC + 0.2 * torch.randn(B, C, generator=gen)
    is_BC = (0.5 + torch.rand(B, C, generator=gen)).clamp(max=1.2)
    adv_B = torch.tensor([1.0, -0.7, 0.4, -1.2])
    beta, accum = (0.05, 2) if extras else (0.0, 1)
    step_tokens = comp_mask_BC.sum() + (11.0 if extras else 0.0)  # the other micro-batch's 11 tokens

    inputs: dict[str, Any] = {
        "prompt_ids": torch.zeros(B, P, dtype=torch.long),
        "prompt_mask": torch.ones(B, P, dtype=torch.long),
        "completion_ids": torch.zeros(B, C, dtype=torch.long),
        "completion_mask": comp_mask_BC.long(),
        "advantages": adv_B,
        "old_per_token_logps": old_BC,
        "num_items_in_batch": step_tokens,
    }
    if extras:
        inputs["ref_per_token_logps"] = ref_BC
        inputs["importance_sampling_ratio"] = is_BC
    trl_lp_BC = lp_BC.clone().requires_grad_()
    trl_value, metrics = trl_loss(type_, trl_lp_BC, inputs, beta, max_len, accum, tmp_path)
    trl_value.backward()

    # ours sees whole sequences: P prompt columns (mask 0) then the completion
    def full(x_BC: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.zeros(B, P), x_BC], dim=1)  # [B, P + C]

    lp_BT = full(lp_BC).requires_grad_()
    ours, stats = policy_loss(
        lp_BT,
        full(old_BC),
        adv_B,
        full(comp_mask_BC),
        LossConfig(type=type_, epsilon=0.2, epsilon_high=0.28, beta=beta, max_completion_length=max_len),
        ref_logprobs_BT=full(ref_BC) if extras else None,
        is_weights_BT=full(is_BC) if extras else None,
        num_items_in_batch=float(step_tokens),
        num_sequences_in_batch=B * accum,
    )
    ours.backward()
    assert ours.item() == pytest.approx(trl_value.item(), rel=1e-5, abs=1e-7)
    assert lp_BT.grad is not None and trl_lp_BC.grad is not None
    assert torch.allclose(lp_BT.grad[:, P:], trl_lp_BC.grad, atol=1e-6)
    assert torch.all(lp_BT.grad[:, :P] == 0)
    for ours_key, trl_key in [("low", "low_mean"), ("high", "high_mean"), ("region", "region_mean")]:
        assert stats[f"clip/{ours_key}_frac"] == pytest.approx(metrics[f"clip_ratio/{trl_key}"][0], abs=1e-6)
    assert stats["clip/low_frac"] > 0 and stats["clip/high_frac"] > 0  # both sides are exercised
    if extras:
        assert stats["kl/mean"] == pytest.approx(metrics["kl"][0], rel=1e-5)


def test_kl_gradient_share_is_the_kl_terms_part_of_the_logprob_gradient() -> None:
    """``kl/grad_share``: per token the surrogate's gradient with respect to the logprob is ``-r A w`` (0 where
    the ratio is clipped) and the KL term's ``beta (1 - exp(ref - lp))``; the share is the KL's part of the
    sum of their sizes. Checked against autograd on the loss itself."""
    from train.config import LossConfig
    from train.loss import kl_gradient_share, policy_loss

    cfg = LossConfig(beta=0.1, epsilon=0.2, epsilon_high=0.28)
    lp = torch.tensor([[-1.0, -2.0, -0.5, -1.5]], requires_grad=True)
    old = torch.tensor([[-1.0, -2.5, -0.5, -1.4]])  # token 1: r = e^0.5, clipped for A > 0
    ref = torch.tensor([[-1.2, -1.0, -0.7, -1.5]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0]])
    adv = torch.tensor([0.5])
    loss, stats = policy_loss(lp, old, adv, mask, cfg, ref_logprobs_BT=ref, num_items_in_batch=1.0)
    (grad,) = torch.autograd.grad(loss, lp)
    ratio = torch.exp((lp.detach() - old) * mask)
    kl_grad = (cfg.beta * (1 - torch.exp((ref - lp.detach()) * mask))) * mask
    policy_grad = grad - kl_grad  # what autograd gave, less the KL term's part
    want = float(kl_grad.abs().sum() / (policy_grad.abs().sum() + kl_grad.abs().sum()))
    assert policy_grad[0, 1] == 0.0  # the clipped token carries only the KL term
    got = kl_gradient_share(lp.detach(), ref, ratio, adv.expand(1, 4), None, mask, cfg)
    assert got == pytest.approx(want, rel=1e-5) and stats["kl/grad_share"] == pytest.approx(want, rel=1e-5)
    assert 0.0 < want < 1.0
    # beta 0: no KL term, no share logged
    _, no_kl = policy_loss(lp, old, adv, mask, LossConfig(beta=0.0), ref_logprobs_BT=ref)
    assert "kl/grad_share" not in no_kl
