"""The local backend's sampling loop: a KV-cached decode of left-padded rows with the logprob of every
sampled token, in place of ``transformers``' ``generate``.

Why not ``generate``: on a CPU, decoding a small model is bound by streaming its weights and by per-step
overhead, and three costs of ``generate`` are avoidable.
- ``torch.multinomial`` draws one exponential per vocabulary entry and row (17 ms a step for 8 rows of a
  49,152-token vocabulary on a 2-core EPYC); inverse-CDF sampling draws one uniform per row.
- Its logits processors copy the logits several times a step; here the logprobs the trainer compares
  against (the log-softmax of the raw logits over the temperature) are computed once and sampled from.
- ``nn.Linear`` calls MKL's GEMM, which reads a weight matrix 2-3x slower at 8 rows than oneDNN's with the
  weight reordered once into its blocked layout (``packed_linears``).

The logprobs are over the whole vocabulary, before ``min_tokens`` keeps the stop tokens out and before top-p
trims the tail: the quantity the trainer computes for the same token.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from envs.models.kv_cache import cache_name


@dataclass
class Decoding:
    """How to sample: the settings of one batch of rows."""

    max_new_tokens: int
    min_new_tokens: int
    temperature: float
    """0 samples greedily (logprobs are then those of the raw logits)."""
    top_p: float
    stop_ids: list[int]
    """Tokens that end a row (kept in its output); a finished row is fed ``pad_id`` after."""
    pad_id: int
    row_max_tokens: list[int] | None = None
    """Each row's own token limit, at most ``max_new_tokens`` (None: ``max_new_tokens`` for all); a row stops
    at its limit, so requests whose budgets differ share one batch."""
    row_min_tokens: list[int] | None = None
    """Each row's own ``min_new_tokens`` (None: ``min_new_tokens`` for all)."""
    sync_every: int = 1
    """Check whether every row has stopped once per this many tokens: each check waits for the device, so
    on a GPU a few tokens decoded past the end (fed and returned as ``pad_id``) cost less than a stall per
    token."""


@dataclass
class DecodeStats:
    """What the decode loops of a backend did (hardware-independent: they predict a GPU's load)."""

    forwards: int = 0
    """Decode forward passes (one new token per row each); prefills are not counted."""
    rows: int = 0
    """Rows summed over those passes."""
    live_rows: int = 0
    """Rows summed over those passes that had not stopped yet (the rest are fed padding)."""
    prefills: int = 0
    """Prefill forward passes."""
    batches: int = 0
    """Batches decoded."""

    def since(self, earlier: DecodeStats) -> DecodeStats:
        """The counts added after ``earlier`` (a copy of these stats taken then)."""
        return DecodeStats(
            *(
                getattr(self, f) - getattr(earlier, f)
                for f in ("forwards", "rows", "live_rows", "prefills", "batches")
            )
        )

    def as_dict(self) -> dict[str, float]:
        """The counts, and rows per decode forward (all and live)."""
        per = max(self.forwards, 1)
        return {
            "decode_forwards": float(self.forwards),
            "prefill_forwards": float(self.prefills),
            "batches": float(self.batches),
            "rows_per_forward": self.rows / per,
            "live_rows_per_forward": self.live_rows / per,
        }


def decode(
    model: Any,
    input_ids: Any,
    attention_mask: Any,
    cache: Any,
    how: Decoding,
    stats: DecodeStats | None = None,
) -> tuple[Any, Any]:
    """Sample up to ``how.max_new_tokens`` tokens after each left-padded row of ``input_ids``; returns the
    tokens and their logprobs, both [rows, steps] (steps stop early once every row has stopped). ``cache``,
    when given, holds every prompt token but the last (the shared prefill)."""
    import torch

    device = input_ids.device
    rows = input_ids.shape[0]
    mask = attention_mask
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    feed, feed_positions = (input_ids, positions) if cache is None else (input_ids[:, -1:], positions[:, -1:])
    stop = torch.tensor(how.stop_ids, dtype=torch.long, device=device)
    done = torch.zeros(rows, dtype=torch.bool, device=device)
    max_R = torch.tensor(how.row_max_tokens or [how.max_new_tokens] * rows, device=device)  # [R]
    min_R = torch.tensor(how.row_min_tokens or [how.min_new_tokens] * rows, device=device)  # [R]
    longest_min = max(how.row_min_tokens) if how.row_min_tokens else how.min_new_tokens
    live = torch.zeros((), dtype=torch.long, device=device)
    tokens, logprobs = [], []
    for step in range(how.max_new_tokens):
        live += (~done).sum()
        out = model(
            input_ids=feed,
            attention_mask=mask,
            position_ids=feed_positions,
            use_cache=True,
            logits_to_keep=1,
            **{cache_name(): cache},  # ``cache=cache`` in newer transformers (envs.models.kv_cache)
        )
        cache = getattr(out, cache_name())
        if step == 0:  # from here on each token is written into room kept for it
            cache = keys_in_place(cache, how.max_new_tokens)
        logits_RV = out.logits[:, -1, :].float()
        # past every row's min_tokens (the usual case from the first step): no per-row mask to build
        allow_stop = step >= longest_min or (step >= min_R if how.row_min_tokens else False)
        token_R, logprob_R = _pick(logits_RV, how, allow_stop=allow_stop, stop_ids=stop)
        token_R = token_R.masked_fill(done, how.pad_id)
        tokens.append(token_R)
        logprobs.append(logprob_R)
        done |= torch.isin(token_R, stop) | (max_R <= step + 1)
        if (step + 1) % how.sync_every == 0 and bool(done.all()):
            break
        feed, feed_positions = token_R[:, None], positions[:, -1:] + 1 + step
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
    if stats is not None:
        stats.forwards += len(tokens)
        stats.rows += rows * len(tokens)
        stats.live_rows += int(live)
        stats.batches += 1
    return torch.stack(tokens, dim=1), torch.stack(logprobs, dim=1)


def keys_in_place(cache: Any, room: int) -> Any:
    """``cache`` with each of its plain transformers ``DynamicLayer`` s replaced by one that keeps ``room``
    more positions allocated and writes each new key and value into them, handing the attention a view of
    the filled part: the same tensors as ``DynamicLayer``'s, without its ``torch.cat`` of the whole cache per
    layer and token, which copies every row's keys and values again at each step (a fifth of a float32
    decode of 32 rows: ``docs/results.md``). Other layer types (sliding windows, quantised) stay as they
    are; a layer that runs out of room goes back to concatenating."""
    layers = getattr(cache, "layers", None)
    if layers is None:
        return cache
    in_place = _in_place_layer()
    for i, layer in enumerate(layers):
        if type(layer) is in_place.__base__ and getattr(layer, "is_initialized", False):
            layers[i] = in_place(layer, room)
    return cache


@functools.cache
def _in_place_layer() -> Any:
    """The ``DynamicLayer`` subclass of ``keys_in_place`` (built on first use: transformers imports late)."""
    import torch
    from transformers.cache_utils import DynamicLayer

    class InPlaceLayer(DynamicLayer):
        def __init__(self, layer: Any, room: int) -> None:
            self.__dict__.update(layer.__dict__)
            n = layer.keys.shape[-2]
            self._keys = layer.keys.new_empty((*layer.keys.shape[:-2], n + room, layer.keys.shape[-1]))
            self._values = layer.values.new_empty(
                (*layer.values.shape[:-2], n + room, layer.values.shape[-1])
            )
            self._keys[..., :n, :] = layer.keys
            self._values[..., :n, :] = layer.values

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            n = 0 if self.keys is None else self.keys.shape[-2]
            end = n + key_states.shape[-2]
            if self._keys is None or self._values is None or end > self._keys.shape[-2]:
                self._keys = self._values = None  # out of room: concatenate from now on
                return super().update(key_states, value_states, *args, **kwargs)
            with torch.no_grad():
                self._keys[..., n:end, :] = key_states
                self._values[..., n:end, :] = value_states
            self.keys, self.values = self._keys[..., :end, :], self._values[..., :end, :]
            return self.keys, self.values

    return InPlaceLayer


def _pick(logits_RV: Any, how: Decoding, allow_stop: Any, stop_ids: Any = None) -> tuple[Any, Any]:
    """One token per row and its logprob under ``log_softmax(logits / temperature)``; ``allow_stop`` is a
    bool for every row or a [R] bool tensor (min_tokens per row). ``stop_ids``: ``how.stop_ids`` as a tensor
    on the logits' device, made once per batch by the caller (a copy to a GPU per token would wait for it)."""
    import torch

    temperature = how.temperature if how.temperature > 0 else 1.0
    logprobs_RV = torch.log_softmax(logits_RV / temperature, dim=-1)
    choice_RV = logprobs_RV
    if allow_stop is not True and stop_ids is None:
        stop_ids = torch.tensor(how.stop_ids, device=logits_RV.device)
    if isinstance(allow_stop, bool):
        if not allow_stop:  # min_tokens: the stop tokens cannot be chosen yet
            choice_RV = choice_RV.index_fill(1, stop_ids, -torch.inf)
    else:  # per row: the rows still under their min_tokens cannot choose a stop token
        blocked_RV = torch.zeros_like(choice_RV, dtype=torch.bool)
        blocked_RV[:, stop_ids] = True
        choice_RV = choice_RV.masked_fill(blocked_RV & ~allow_stop[:, None], -torch.inf)
    token_R = choice_RV.argmax(dim=-1) if how.temperature <= 0 else _inverse_cdf(choice_RV, how.top_p)
    return token_R, logprobs_RV.gather(1, token_R[:, None]).squeeze(1)


def _inverse_cdf(logprobs_RV: Any, top_p: float) -> Any:
    """A token per row drawn from ``softmax(logprobs_RV)`` restricted to its top-``top_p`` nucleus: one
    uniform per row against the cumulative probabilities (the tokens in descending order under top-p)."""
    import torch

    probs_RV = logprobs_RV.exp()
    order_RV = None
    if top_p < 1.0:  # keep a token while the more likely ones hold less than top_p of the mass
        probs_RV, order_RV = probs_RV.sort(dim=-1, descending=True)
        cdf_RV = probs_RV.cumsum(-1)
        probs_RV = probs_RV.masked_fill(cdf_RV - probs_RV >= top_p * cdf_RV[:, -1:], 0.0)
    cdf_RV = probs_RV.cumsum(-1)
    u_R1 = torch.rand(cdf_RV.shape[0], 1, device=cdf_RV.device) * cdf_RV[:, -1:]
    # the first entry whose cdf exceeds u: an entry of probability 0 never does
    index_R = torch.searchsorted(cdf_RV, u_R1, right=True).clamp(max=cdf_RV.shape[1] - 1).squeeze(1)
    return index_R if order_RV is None else order_RV.gather(1, index_R[:, None]).squeeze(1)


@contextlib.contextmanager
def packed_linears(model: Any) -> Iterator[None]:
    """Within the block, every float32 ``nn.Linear`` of ``model`` on the CPU (and every bf16 one where the CPU
    computes bf16 natively) runs oneDNN's matrix product on a copy of its weight reordered once into
    oneDNN's blocked layout (inference only: the copy does not follow later changes to the weight, and holds
    as much memory as the weights). Does nothing where oneDNN is unavailable."""
    import torch

    if not torch.backends.mkldnn.is_available():
        yield
        return
    dtypes = {torch.float32}
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():  # AVX-512 BF16 or AMX: oneDNN reorders bf16 too
        dtypes.add(torch.bfloat16)
    patched = []
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if not isinstance(module, torch.nn.Linear) or weight is None:
            continue
        if weight.device.type != "cpu" or weight.dtype not in dtypes:
            continue
        packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 8)
        setattr(module, "forward", _packed_forward(packed, module.bias))  # noqa: B010 (an instance attribute)
        patched.append(module)
    try:
        yield
    finally:
        for module in patched:
            del module.forward


def _packed_forward(packed: Any, bias: Any) -> Any:
    import torch

    def forward(x: Any) -> Any:
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")

    return forward
