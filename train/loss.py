"""The GRPO policy loss: small pure functions on tensors. Shapes are in the names (B sequences, T tokens,
V vocabulary).

Positions are aligned with ``input_ids_BT``: position t holds what concerns token t (its logprob, predicted
from position t - 1). Position 0 has no prediction and holds 0; the loss mask is 0 there (it is prompt).

Matches TRL 1.16's ``GRPOTrainer._compute_loss`` for ``loss_type`` grpo, dr_grpo, dapo and bnpo (token-level
importance sampling, no ``delta``, no entropy mask or bonus), tested in ``tests/train/test_loss.py``:

- per token: ``-min(r * A, clip(r, 1 - epsilon, 1 + epsilon_high) * A)`` with ``r = exp(lp - old_lp)``;
- the truncated importance weight against the inference engine multiplies that policy term only;
- ``beta * k3`` is added after, not weighted: ``k3 = exp(ref - lp) - (ref - lp) - 1``. This is TRL with
  ``use_bias_correction_kl=False``; TRL 1.16's default (True) multiplies the KL by the policy ratio, which
  changes its gradient even on policy.

Normalisation (``NORMALISERS``): every loss returned is this micro-batch's share of the *optimiser step's*
loss, so the trainer just sums micro-batches (backward on each) with no branch on the loss type. The caller
passes the step's counts; the defaults (this micro-batch's own counts) make a single micro-batch a whole step.
Under data parallelism with gradient averaging, pass the step's global counts divided by the world size
(as TRL does with ``num_items_in_batch / num_processes``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from train.config import LossConfig

Stats = dict[str, float]


# ---------------------------------------------------------------------------------------------- logprobs


def _scaled(logits_bTV: torch.Tensor, temperature: float) -> torch.Tensor:
    """float32 ``logits / temperature``; no copy at all for float32 logits at temperature 1."""
    logits_bTV = logits_bTV.float()
    return logits_bTV if temperature == 1.0 else logits_bTV / temperature


def next_token_logprobs(
    logits_bTV: torch.Tensor, targets_bT: torch.Tensor, temperature: float
) -> torch.Tensor:
    """``[b, T]`` float32: ``log_softmax(logits / temperature)`` of each target, as ``logit - logsumexp``."""
    scaled_bTV = _scaled(logits_bTV, temperature)
    return scaled_bTV.gather(-1, targets_bT.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(scaled_bTV, dim=-1)


def next_token_entropy(logits_bTV: torch.Tensor, temperature: float) -> torch.Tensor:
    """``[b, T]`` float32: entropy ``logsumexp(z) - sum(softmax(z) * z)`` with
    ``z = logits / temperature``."""
    z_bTV = _scaled(logits_bTV, temperature)
    return torch.logsumexp(z_bTV, dim=-1) - (torch.softmax(z_bTV, dim=-1) * z_bTV).sum(-1)


def token_logprobs(
    logits_BTV: torch.Tensor, input_ids_BT: torch.Tensor, temperature: float = 1.0, rows_per_chunk: int = 1
) -> torch.Tensor:
    """``[B, T]`` float32: ``log_softmax(logits[t - 1] / temperature)[input_ids[t]]`` at position t;
    0 at t = 0.

    The definition the training step's ``target_logprobs`` is tested against, bit for bit.
    Works ``rows_per_chunk`` sequences at a time as ``logit[token] - logsumexp(logits)``: no ``[B, T, V]``
    log-softmax is built. For float32 logits at temperature 1 nothing of size V is copied; otherwise each
    chunk makes a float32 ``[rows, T, V]`` copy (kept for backward when the logits need gradients).
    """
    chunks_BT = [
        next_token_logprobs(
            logits_BTV[start : start + rows_per_chunk, :-1],
            input_ids_BT[start : start + rows_per_chunk, 1:],
            temperature,
        )
        for start in range(0, logits_BTV.shape[0], rows_per_chunk)
    ]
    return torch.nn.functional.pad(torch.cat(chunks_BT), (1, 0))  # [B, T], 0 at position 0


def token_entropy(
    logits_BTV: torch.Tensor, temperature: float = 1.0, rows_per_chunk: int = 1
) -> torch.Tensor:
    """``[B, T]`` float32: entropy of the distribution that predicted token t (from logits t - 1); 0 at t = 0.

    ``rows_per_chunk`` sequences at a time. Call it under ``torch.no_grad()`` when it is only logged.
    """
    chunks_BT = [
        next_token_entropy(logits_BTV[start : start + rows_per_chunk, :-1], temperature)
        for start in range(0, logits_BTV.shape[0], rows_per_chunk)
    ]
    return torch.nn.functional.pad(torch.cat(chunks_BT), (1, 0))  # [B, T]


CHUNK_ELEMENTS = 1 << 22
"""Logit elements (16 MiB in float32) that ``target_logprobs`` turns into float32 at a time."""


class _TargetLogprobs(torch.autograd.Function):
    """``target_logprobs`` with a hand-written backward: works on ``CHUNK_ELEMENTS`` logits at a time, in one
    float32 buffer reused chunk after chunk, and keeps only the logits (in their own dtype) and one
    logsumexp per position for the backward."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        logits_bTV: torch.Tensor,
        targets_bS: torch.Tensor,
        temperature: float,
        entropy: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        b, S = targets_bS.shape
        logprobs_bS = torch.empty((b, S), dtype=torch.float32, device=logits_bTV.device)
        lse_bS = torch.empty_like(logprobs_bS)
        entropy_bS = torch.empty_like(logprobs_bS) if entropy else None
        chunks = _chunks(logits_bTV, S)
        z_buffer, p_buffer = _buffer(logits_bTV, chunks), _buffer(logits_bTV, chunks) if entropy else None
        for row, cols in chunks:
            z_cV = _scaled_into(z_buffer, logits_bTV[row, cols], temperature)
            lse_c = lse_bS[row, cols] = torch.logsumexp(z_cV, dim=-1)
            target_c = z_cV.gather(-1, targets_bS[row, cols, None]).squeeze(-1)
            logprobs_bS[row, cols] = target_c - lse_c
            if entropy_bS is not None and p_buffer is not None:  # next_token_entropy's operations
                p_cV = torch.ops.aten._softmax.out(z_cV, -1, False, out=p_buffer[: len(z_cV)])
                entropy_bS[row, cols] = lse_c - p_cV.mul_(z_cV).sum(-1)
        ctx.save_for_backward(logits_bTV, targets_bS, lse_bS)
        ctx.temperature = temperature  # type: ignore[attr-defined]
        if entropy_bS is not None:
            ctx.mark_non_differentiable(entropy_bS)
        return logprobs_bS, entropy_bS

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad_bS: torch.Tensor, _: torch.Tensor | None
    ) -> tuple[torch.Tensor, None, None, None]:
        logits_bTV, targets_bS, lse_bS = ctx.saved_tensors  # type: ignore[attr-defined]
        temperature: float = ctx.temperature  # type: ignore[attr-defined]
        S = targets_bS.shape[1]
        grad_bTV = torch.empty_like(logits_bTV)
        grad_bTV[:, S:] = 0  # positions past the targets predict nothing
        chunks = _chunks(logits_bTV, S)
        buffer = _buffer(logits_bTV, chunks)
        for row, cols in chunks:
            # d logprob / d z = onehot(target) - softmax(z), times the incoming gradient g; / temperature
            g_c1 = grad_bS[row, cols, None]
            grad_cV = _scaled_into(buffer, logits_bTV[row, cols], temperature)
            grad_cV.sub_(lse_bS[row, cols, None]).exp_().mul_(-g_c1)
            grad_cV.scatter_add_(-1, targets_bS[row, cols, None], g_c1)
            grad_bTV[row, cols] = grad_cV if temperature == 1.0 else grad_cV.div_(temperature)
        return grad_bTV, None, None, None


def _buffer(logits_bTV: torch.Tensor, chunks: list[tuple[int, slice]]) -> torch.Tensor:
    """A float32 [positions, V] buffer for the largest of ``chunks``."""
    rows = max((c.stop - c.start for _, c in chunks), default=0)
    return torch.empty((rows, logits_bTV.shape[-1]), dtype=torch.float32, device=logits_bTV.device)


def _scaled_into(buffer: torch.Tensor, logits_cV: torch.Tensor, temperature: float) -> torch.Tensor:
    """``_scaled(logits_cV, temperature)`` written into the head of ``buffer`` (the same values)."""
    z_cV = buffer[: len(logits_cV)].copy_(logits_cV)
    return z_cV if temperature == 1.0 else z_cV.div_(temperature)


def _chunks(logits_bTV: torch.Tensor, positions: int) -> list[tuple[int, slice]]:
    """(row, positions) blocks of about ``CHUNK_ELEMENTS`` logits covering the first ``positions`` of each
    row."""
    step = max(1, CHUNK_ELEMENTS // max(logits_bTV.shape[-1], 1))
    return [
        (row, slice(start, min(start + step, positions)))
        for row in range(logits_bTV.shape[0])
        for start in range(0, positions, step)
    ]


def target_logprobs(
    logits_bTV: torch.Tensor, targets_bS: torch.Tensor, temperature: float, entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``[b, S]`` float32 ``next_token_logprobs`` of the first S positions (S <= T; later positions are
    ignored, with zero gradient), and their ``next_token_entropy`` when ``entropy`` (no gradient).

    The same values, and the same gradient, bit for bit, as those two functions under autograd, computed
    without a float32 copy of all the logits: about ``CHUNK_ELEMENTS`` logits at a time, in the forward and
    again in the backward, which keeps only the logits and one logsumexp a position. Autograd instead keeps a
    float32 copy for the backward, and the backward of each row's slice fills a zero tensor the size of
    all the logits (docs/results.md, the train step's logit work)."""
    logprobs_bS, entropy_bS = _TargetLogprobs.apply(  # type: ignore[no-untyped-call]
        logits_bTV, targets_bS, temperature, entropy
    )
    return logprobs_bS, entropy_bS


# ---------------------------------------------------------------------------------------------- masks


def masked_mean(x_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Scalar: mean of ``x`` over the tokens where ``mask`` is 1 (0 when there are none)."""
    return (x_BT * mask_BT).sum() / mask_BT.sum().clamp(min=1.0)


def masked_sequence_mean(x_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """``[B]``: each sequence's mean of ``x`` over its masked tokens (0 for a sequence with none)."""
    return (x_BT * mask_BT).sum(-1) / mask_BT.sum(-1).clamp(min=1.0)


def _masked_min_max(x_BT: torch.Tensor, mask_BT: torch.Tensor) -> tuple[float, float]:
    """Min and max of a ratio over masked tokens; 1.0 (the neutral ratio) when the mask is empty, so that
    token-weighted averages over micro-batches (weight 0 here) never turn into NaN."""
    kept = x_BT[mask_BT.bool()]
    if kept.numel() == 0:
        return 1.0, 1.0
    return kept.min().item(), kept.max().item()


# ---------------------------------------------------------------------------------------------- IS weights


@torch.no_grad()
def importance_weights(
    old_logprobs_BT: torch.Tensor, inference_logprobs_BT: torch.Tensor, mask_BT: torch.Tensor, cap: float
) -> tuple[torch.Tensor, Stats]:
    """Truncated importance sampling against the inference engine (TRL: ``vllm_importance_sampling_mode=
    "token_truncate"``): ``[B, T]`` weights ``min(exp(old - inference), cap)``; 1 where the mask is 0.

    A NaN inference logprob (the engine returned none) counts as no mismatch, weight 1, as in TRL.
    Stats are over masked tokens, the ratios *before* truncation: ``is/ratio_mean``, ``is/ratio_min``,
    ``is/ratio_max`` (1.0 with no tokens) and ``is/truncated_frac``.
    """
    log_ratio_BT = torch.nan_to_num((old_logprobs_BT - inference_logprobs_BT) * mask_BT, nan=0.0)
    ratio_BT = torch.exp(log_ratio_BT)  # [B, T], 1 off the mask
    lo, hi = _masked_min_max(ratio_BT, mask_BT)
    stats = {
        "is/ratio_mean": masked_mean(ratio_BT, mask_BT).item(),
        "is/ratio_min": lo,
        "is/ratio_max": hi,
        "is/truncated_frac": masked_mean((ratio_BT > cap).float(), mask_BT).item(),
    }
    return ratio_BT.clamp(max=cap), stats


# ---------------------------------------------------------------------------------------------- normalisers


def _grpo(
    loss_BT: torch.Tensor, mask_BT: torch.Tensor, items: float, seqs: float, max_len: int
) -> torch.Tensor:
    """Mean over each sequence's tokens, then mean over the step's sequences."""
    return masked_sequence_mean(loss_BT, mask_BT).sum() / seqs


def _dr_grpo(
    loss_BT: torch.Tensor, mask_BT: torch.Tensor, items: float, seqs: float, max_len: int
) -> torch.Tensor:
    """Sum over tokens divided by a constant: sequences x max_completion_length."""
    return (loss_BT * mask_BT).sum() / (seqs * max_len)


def _dapo(
    loss_BT: torch.Tensor, mask_BT: torch.Tensor, items: float, seqs: float, max_len: int
) -> torch.Tensor:
    """Sum over tokens divided by the loss tokens of the whole optimiser step."""
    return (loss_BT * mask_BT).sum() / max(items, 1.0)


def _bnpo(
    loss_BT: torch.Tensor, mask_BT: torch.Tensor, items: float, seqs: float, max_len: int
) -> torch.Tensor:
    """Mean over this micro-batch's tokens, weighted by its share of the step's sequences (B / seqs)."""
    return masked_mean(loss_BT, mask_BT) * (loss_BT.shape[0] / seqs)


Normaliser = Callable[[torch.Tensor, torch.Tensor, float, float, int], torch.Tensor]
NORMALISERS: dict[str, Normaliser] = {"grpo": _grpo, "dr_grpo": _dr_grpo, "dapo": _dapo, "bnpo": _bnpo}
"""``LossConfig.type`` -> (per-token loss [B, T], mask [B, T], step tokens, step sequences, max length) ->
scalar."""


# ---------------------------------------------------------------------------------------------- the loss


def k3_kl(logprobs_BT: torch.Tensor, ref_logprobs_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """``[B, T]``: the k3 estimator of KL(policy || reference), ``exp(ref - lp) - (ref - lp) - 1`` (>= 0);
    0 off the mask (the difference is zeroed before ``exp``, so padding can never overflow into NaN)."""
    diff_BT = (ref_logprobs_BT - logprobs_BT) * mask_BT
    return torch.exp(diff_BT) - diff_BT - 1


def clipped_surrogate(ratio_BT: torch.Tensor, advantages_BT: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    """``[B, T]``: ``-min(r * A, clip(r, 1 - epsilon, 1 + epsilon_high) * A)``."""
    clipped_BT = ratio_BT.clamp(1 - cfg.epsilon, 1 + cfg.epsilon_high)
    return -torch.min(ratio_BT * advantages_BT, clipped_BT * advantages_BT)


def policy_loss(
    logprobs_BT: torch.Tensor,
    old_logprobs_BT: torch.Tensor,
    advantages_B: torch.Tensor,
    loss_mask_BT: torch.Tensor,
    cfg: LossConfig,
    ref_logprobs_BT: torch.Tensor | None = None,
    is_weights_BT: torch.Tensor | None = None,
    num_items_in_batch: float | None = None,
    num_sequences_in_batch: float | None = None,
) -> tuple[torch.Tensor, Stats]:
    """The micro-batch's share of the step's clipped policy loss (scalar) and its stats.

    ``advantages_B``: [B] one advantage per sequence, or [B, T] one per token (credit per reply).
    ``num_items_in_batch``: loss tokens of the whole optimiser step (dapo); default this micro-batch's.
    ``num_sequences_in_batch``: sequences of the whole step (grpo, dr_grpo, bnpo); default this micro-batch's.
    ``ref_logprobs_BT`` is needed when ``cfg.beta > 0``; when given, its KL is logged whatever beta is.
    Stats (over masked tokens): ``clip/low_frac`` (r < 1 - epsilon with A < 0), ``clip/high_frac``
    (r > 1 + epsilon_high with A > 0), ``clip/region_frac`` (either), ``ratio/mean|min|max``, ``kl/mean``,
    ``loss/tokens``, and with ``beta > 0`` ``kl/grad_share`` (``kl_gradient_share``).
    """
    if cfg.beta > 0 and ref_logprobs_BT is None:
        raise ValueError("policy_loss: cfg.beta > 0 needs ref_logprobs_BT")
    mask_BT = loss_mask_BT.to(logprobs_BT.dtype)
    advantages = advantages_B.to(logprobs_BT.dtype)
    advantages_BT = advantages.unsqueeze(1).expand_as(logprobs_BT) if advantages.dim() == 1 else advantages
    ratio_BT = torch.exp((logprobs_BT - old_logprobs_BT) * mask_BT)  # [B, T], 1 off the mask (no overflow)
    per_token_BT = clipped_surrogate(ratio_BT, advantages_BT, cfg)
    if is_weights_BT is not None:
        per_token_BT = per_token_BT * is_weights_BT
    kl_BT = k3_kl(logprobs_BT, ref_logprobs_BT, mask_BT) if ref_logprobs_BT is not None else None
    if kl_BT is not None and cfg.beta > 0:
        per_token_BT = per_token_BT + cfg.beta * kl_BT
    tokens = float(mask_BT.sum().item())
    items = tokens if num_items_in_batch is None else float(num_items_in_batch)
    seqs = float(logprobs_BT.shape[0]) if num_sequences_in_batch is None else float(num_sequences_in_batch)
    loss = NORMALISERS[cfg.type](per_token_BT, mask_BT, items, seqs, cfg.max_completion_length)
    stats = _loss_stats(ratio_BT.detach(), advantages_BT, mask_BT, cfg, kl_BT, tokens)
    if ref_logprobs_BT is not None and cfg.beta > 0:
        stats["kl/grad_share"] = kl_gradient_share(
            logprobs_BT, ref_logprobs_BT, ratio_BT.detach(), advantages_BT, is_weights_BT, mask_BT, cfg
        )
    return loss, stats


@torch.no_grad()
def _loss_stats(
    ratio_BT: torch.Tensor,
    advantages_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    cfg: LossConfig,
    kl_BT: torch.Tensor | None,
    tokens: float,
) -> Stats:
    """Clip fractions, policy-ratio range and KL over the masked tokens (TRL's definitions of the clips)."""
    low_BT = (ratio_BT < 1 - cfg.epsilon) & (advantages_BT < 0)
    high_BT = (ratio_BT > 1 + cfg.epsilon_high) & (advantages_BT > 0)
    lo, hi = _masked_min_max(ratio_BT, mask_BT)
    stats = {
        "clip/low_frac": masked_mean(low_BT.float(), mask_BT).item(),
        "clip/high_frac": masked_mean(high_BT.float(), mask_BT).item(),
        "clip/region_frac": masked_mean((low_BT | high_BT).float(), mask_BT).item(),
        "ratio/mean": masked_mean(ratio_BT, mask_BT).item(),
        "ratio/min": lo,
        "ratio/max": hi,
        "loss/tokens": tokens,
    }
    if kl_BT is not None:
        stats["kl/mean"] = masked_mean(kl_BT.detach(), mask_BT).item()
    return stats


@torch.no_grad()
def kl_gradient_share(
    logprobs_BT: torch.Tensor,
    ref_logprobs_BT: torch.Tensor,
    ratio_BT: torch.Tensor,
    advantages_BT: torch.Tensor,
    is_weights_BT: torch.Tensor | None,
    mask_BT: torch.Tensor,
    cfg: LossConfig,
) -> float:
    """The KL term's share of the loss's gradient with respect to the token logprobs, over masked tokens:
    ``sum |d(beta k3)/d lp| / (sum |d surrogate / d lp| + sum |d(beta k3)/d lp|)``. Per token the surrogate's
    derivative is ``-r A w`` where its ratio is not clipped (0 where it is) and the KL term's is
    ``beta (1 - exp(ref - lp))``; both reach the weights through the same ``d lp / d theta``, so the share
    tells how much of what the update does is pulling back to the reference. 0.0 without tokens."""
    weights_BT = is_weights_BT if is_weights_BT is not None else torch.ones_like(ratio_BT)
    clipped_BT = ratio_BT.clamp(1 - cfg.epsilon, 1 + cfg.epsilon_high)
    active_BT = (ratio_BT * advantages_BT <= clipped_BT * advantages_BT).to(ratio_BT.dtype)  # min picks r A
    policy = (ratio_BT * advantages_BT * weights_BT * active_BT).abs().mul(mask_BT).sum()
    diff_BT = (ref_logprobs_BT - logprobs_BT) * mask_BT
    kl = (cfg.beta * (1 - torch.exp(diff_BT))).abs().mul(mask_BT).sum()
    total = float((policy + kl).item())
    return float(kl.item()) / total if total > 0 else 0.0
