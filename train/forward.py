"""The forward passes of a training step: each token's logprob (and entropy) under the policy or its
reference, from a padded micro-batch, a packed one, or with each shared prompt run once.

The output head runs only where a loss token is predicted; ``train.step`` calls these and turns the
logprobs into the step's loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from train.loss import target_logprobs
from train.types import TrainBatch

if TYPE_CHECKING:  # imported inside the functions (importing this module stays light)
    import torch

    from train.lora import AdapterOff

    Model = torch.nn.Module | AdapterOff
    """What the forward passes run: the prepared policy, the reference model, or the policy with its
    adapter off (the reference of a LoRA run)."""


def forward_logprobs(
    model: Model,
    batch: TrainBatch,
    temperature: float,
    entropy: bool = True,
    chunk_tokens: int = 0,
    clusters: Sequence[PrefixCluster] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[B, T] logprobs of each token and [B, T] entropies (None with ``entropy=False``), from one forward
    pass.

    The output head runs only from the first position that predicts a loss token (``logits_to_keep``):
    the shared prompt needs no logits, and the head over the vocabulary is the costliest layer of a
    small model and its largest tensor ([B, K, V] logits). Positions before that hold 0 (they are masked
    out of the loss anyway). The reference model of the KL term is run the same way.

    With ``chunk_tokens > 0`` (and a transformers model whose logits are a linear layer of its last hidden
    state) the head runs over about ``chunk_tokens`` positions at a time under activation checkpointing: no
    [B, K, V] logits exist at once, in the forward or the backward, at the price of running the head twice.

    With ``clusters`` (the batch's ``prefix_clusters``, worked out once by the caller:
    ``optim.share_prefix``), rows whose tokens before their first loss token are the same (the replies of one
    group to its prompt) run that prompt once: ``shared_prefix_forward``."""
    import torch

    if clusters is not None and any(c.prefix for c in clusters):
        return shared_prefix_forward(model, batch, clusters, temperature, entropy, chunk_tokens)
    input_ids_BT, mask_BT = batch.input_ids_BT, batch.loss_mask_BT
    width = input_ids_BT.shape[1]
    columns = mask_BT.any(dim=0).nonzero()
    first = int(columns[0]) if len(columns) else width - 1  # first column holding a loss token
    keep = width - max(first, 1) + 1  # logits of positions first-1 .. T-1
    kept_ids_BK = input_ids_BT[:, width - keep :]
    head = _output_head(model) if chunk_tokens > 0 else None
    if head is None:
        logits_BKV = model(
            input_ids=input_ids_BT, attention_mask=batch.attention_mask_BT, logits_to_keep=keep
        ).logits
        logprobs_BS, entropy_BS = target_logprobs(logits_BKV, kept_ids_BK[:, 1:], temperature, entropy)
    else:
        no_logits = torch.zeros(0, dtype=torch.long, device=input_ids_BT.device)
        out = model(
            input_ids=input_ids_BT,
            attention_mask=batch.attention_mask_BT,
            logits_to_keep=no_logits,  # the forward of the wrapper (DDP, DeepSpeed) with an empty head
            output_hidden_states=True,
        )
        hidden_BKH = out.hidden_states[-1][:, width - keep : -1]  # transformers: the final norm's output
        logprobs_BS, entropy_BS = _chunked_head(
            head,
            hidden_BKH,
            kept_ids_BK[:, 1:],
            temperature,
            entropy,
            max(1, chunk_tokens // len(kept_ids_BK)),
        )
    pad = (width - keep + 1, 0)  # the S = keep - 1 predicted positions are the last ones
    logprobs_BT = torch.nn.functional.pad(logprobs_BS, pad)
    return logprobs_BT, None if entropy_BS is None else torch.nn.functional.pad(entropy_BS, pad)


@dataclass(frozen=True)
class PrefixCluster:
    """Rows of a micro-batch that run together in ``shared_prefix_forward``."""

    rows: list[int]
    """The rows, in batch order."""
    prefix: int
    """Leading tokens the rows share, all before their first loss token, run once for all of them; 0 for the
    rows that share nothing (they run as one padded forward, as ``forward_logprobs`` runs a batch)."""
    width: int
    """Columns the rows' real tokens reach: the longest row."""


def prefix_clusters(batch: TrainBatch) -> list[PrefixCluster]:
    """The rows of ``batch`` grouped by their tokens before their first loss token: one cluster per prompt
    that at least two rows answer (``prefix`` its length), then one of every other row (``prefix`` 0: a row
    with no loss token, or alone with its prompt), left out when empty."""
    loss_BT = batch.loss_mask_BT > 0
    lengths = [int(n) for n in batch.attention_mask_BT.sum(dim=1).tolist()]
    has_loss, first_loss = loss_BT.any(dim=1).tolist(), loss_BT.int().argmax(dim=1).tolist()
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    alone: list[int] = []
    ids = batch.input_ids_BT.tolist()
    for row, first in enumerate(first_loss):
        if has_loss[row] and first > 0:
            by_prompt.setdefault(tuple(ids[row][:first]), []).append(row)
        else:
            alone.append(row)
    clusters = []
    for prompt, rows in by_prompt.items():
        if len(rows) > 1:
            clusters.append(PrefixCluster(rows, len(prompt), max(lengths[r] for r in rows)))
        else:
            alone.extend(rows)
    if alone:
        clusters.append(PrefixCluster(sorted(alone), 0, batch.input_ids_BT.shape[1]))
    return clusters


def forward_cost(batch: TrainBatch, clusters: Sequence[PrefixCluster] | None) -> tuple[int, int]:
    """Model forward calls and the positions they run over for ``forward_logprobs`` of this padded
    micro-batch given ``clusters``: one call over rows x width, or two per shared prompt (the prompt once,
    then each row's rest) and one for the rows that share nothing."""
    if clusters is None or not any(c.prefix for c in clusters):
        return 1, batch.input_ids_BT.numel()
    calls, positions = 0, 0
    for c in clusters:
        calls += 2 if c.prefix else 1
        positions += c.prefix + len(c.rows) * (c.width - c.prefix) if c.prefix else len(c.rows) * c.width
    return calls, positions


def shared_prefix_forward(
    model: Model,
    batch: TrainBatch,
    clusters: Sequence[PrefixCluster],
    temperature: float,
    entropy: bool = True,
    chunk_tokens: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``forward_logprobs`` with each prompt run once for all the rows that answer it (``clusters``, the
    batch's ``prefix_clusters``).

    The replies of a GRPO group share their prompt, so a padded micro-batch of one group runs the prompt
    once per row. Here the prompt runs once, as one row, its KV cache is repeated for the group's rows, and
    the rows' own tokens run on top of it: the same logprobs and gradients (the cache keeps its graph, so the
    prompt's weights get every row's gradient), up to the order of float sums, with the prompt's positions
    computed once instead of once per row. The rows that share nothing run as ``forward_logprobs`` runs them.
    Positions before a row's prompt ends hold 0, as they do there. Needs a model that returns its KV cache:
    not under gradient checkpointing (transformers turns the cache off), nor DeepSpeed's engine (two forwards
    for one backward; DDP is tested); ``docs/training.md``, One prompt pass per group."""
    import torch

    from envs.models.kv_cache import cache_name
    from train.micro_batches import take_rows

    width = batch.input_ids_BT.shape[1]
    rows: list[int] = []
    logprobs: list[torch.Tensor] = []
    entropies: list[torch.Tensor] = []
    for cluster in clusters:
        part = take_rows(batch, cluster.rows)
        if cluster.prefix == 0:
            lp_bT, ent_bT = forward_logprobs(model, part, temperature, entropy, chunk_tokens)
        else:
            lp_bS, ent_bS = _prefix_cluster_logprobs(
                model, part, cluster, temperature, entropy, chunk_tokens, cache_name()
            )
            pad = (cluster.prefix, width - cluster.width)  # targets are positions prefix .. width - 1
            lp_bT = torch.nn.functional.pad(lp_bS, pad)
            ent_bT = None if ent_bS is None else torch.nn.functional.pad(ent_bS, pad)
        rows += cluster.rows
        logprobs.append(lp_bT)
        if ent_bT is not None:
            entropies.append(ent_bT)
    back = torch.argsort(torch.tensor(rows, device=batch.input_ids_BT.device))  # batch order again
    logprobs_BT = torch.cat(logprobs)[back]
    return logprobs_BT, torch.cat(entropies)[back] if entropy else None


def _prefix_cluster_logprobs(
    model: Model,
    batch: TrainBatch,
    cluster: PrefixCluster,
    temperature: float,
    entropy: bool,
    chunk_tokens: int,
    cache_keyword: str,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[b, S] logprobs (and entropies) of the targets at positions ``prefix`` .. ``width - 1`` of rows that
    share their first ``prefix`` tokens: the prefix as one row with its KV cache, then the rows' rest on
    the cache repeated b times. The last prefix position predicts each row's first target."""
    import torch

    p, width, b = cluster.prefix, cluster.width, len(cluster.rows)
    ids_bW, attention_bW = batch.input_ids_BT[:, :width], batch.attention_mask_BT[:, :width]
    targets_bS = ids_bW[:, p:]
    head = _output_head(model) if chunk_tokens > 0 else None
    no_logits = torch.zeros(0, dtype=torch.long, device=ids_bW.device)
    # with the chunked head: hidden states, no logits; otherwise logits where a target is predicted
    out_prompt: dict[str, Any] = {"logits_to_keep": 1}
    out_rest: dict[str, Any] = {"logits_to_keep": torch.arange(width - p - 1, device=ids_bW.device)}
    if head is not None:  # (the rest's last token predicts nothing)
        out_prompt = out_rest = {"logits_to_keep": no_logits, "output_hidden_states": True}
    prompt = model(
        input_ids=ids_bW[:1, :p], attention_mask=attention_bW[:1, :p], use_cache=True, **out_prompt
    )
    cache = getattr(prompt, cache_keyword)
    cache.batch_repeat_interleave(b)
    rest = model(input_ids=ids_bW[:, p:], attention_mask=attention_bW, **{cache_keyword: cache}, **out_rest)
    if head is not None:
        last_1H = prompt.hidden_states[-1][:, -1:]  # transformers: the final norm's output
        hidden_bSH = torch.cat([last_1H.expand(b, 1, -1), rest.hidden_states[-1][:, :-1]], dim=1)
        return _chunked_head(head, hidden_bSH, targets_bS, temperature, entropy, max(1, chunk_tokens // b))
    first_b1V = prompt.logits.expand(b, -1, -1).contiguous()  # [b, 1, V]: one row's logits, b targets
    first_lp, first_ent = target_logprobs(first_b1V, targets_bS[:, :1], temperature, entropy)
    rest_lp, rest_ent = target_logprobs(rest.logits, targets_bS[:, 1:], temperature, entropy)
    logprobs_bS = torch.cat([first_lp, rest_lp], dim=1)
    if first_ent is None or rest_ent is None:
        return logprobs_bS, None
    return logprobs_bS, torch.cat([first_ent, rest_ent], dim=1)


def packed_forward_logprobs(
    model: Model, batch: TrainBatch, temperature: float, entropy: bool = True, chunk_tokens: int = 0
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``forward_logprobs`` of a micro-batch packed into one padding-free row (``train.micro_batches``):
    the same [B, T] logprobs and entropies, filled on the loss tokens only (0 elsewhere). The output head
    runs only at the positions that predict a loss token. A micro-batch without loss tokens runs padded, so
    that its backward still reaches every weight."""
    import torch

    from train.micro_batches import packed_inputs

    input_ids_1N, position_ids_1N, predicting_K, targets_BT = packed_inputs(batch)
    if predicting_K.numel() == 0:
        return forward_logprobs(model, batch, temperature, entropy, chunk_tokens)
    targets_K = batch.input_ids_BT[targets_BT]
    head = _output_head(model) if chunk_tokens > 0 else None
    if head is None:
        logits_1KV = model(
            input_ids=input_ids_1N,
            position_ids=position_ids_1N,
            logits_to_keep=predicting_K,
            # transformers reads the sequence boundaries from position_ids only without a cache
            use_cache=False,
        ).logits
        logprobs_1K, entropy_1K = target_logprobs(logits_1KV, targets_K[None], temperature, entropy)
    else:
        no_logits = torch.zeros(0, dtype=torch.long, device=input_ids_1N.device)
        out = model(
            input_ids=input_ids_1N,
            position_ids=position_ids_1N,
            logits_to_keep=no_logits,
            output_hidden_states=True,
            use_cache=False,
        )
        hidden_1KH = out.hidden_states[-1][:, predicting_K]
        chunk = max(1, chunk_tokens)
        logprobs_1K, entropy_1K = _chunked_head(
            head, hidden_1KH, targets_K[None], temperature, entropy, chunk
        )
    logprobs_K, entropy_K = logprobs_1K[0], None if entropy_1K is None else entropy_1K[0]
    logprobs_BT = logprobs_K.new_zeros(targets_BT.shape)
    logprobs_BT[targets_BT] = logprobs_K
    if entropy_K is None:
        return logprobs_BT, None
    entropy_BT = entropy_K.new_zeros(targets_BT.shape)
    entropy_BT[targets_BT] = entropy_K
    return logprobs_BT, entropy_BT


def _output_head(model: Model) -> torch.nn.Module | None:
    """The output layer of a transformers causal LM whose logits are exactly ``head(last hidden state)``;
    None when that does not hold or cannot be used: ZeRO-3 partitions the head's weight outside its own
    forward, some models soft-cap or scale their logits, and a model may keep the pre-norm state last."""
    inner = getattr(model, "module", model)  # under DDP or a DeepSpeed engine
    get_head, config = getattr(inner, "get_output_embeddings", None), getattr(inner, "config", None)
    head = get_head() if get_head is not None else None
    if head is None or getattr(head, "bias", None) is not None or hasattr(head.weight, "ds_id"):
        return None
    if getattr(config, "tie_last_hidden_states", True) is False or hasattr(config, "logit_scale"):
        return None
    return None if getattr(config, "final_logit_softcapping", None) is not None else head


def _chunked_head(
    head: torch.nn.Module,
    hidden_BKH: torch.Tensor,
    targets_BK: torch.Tensor,
    temperature: float,
    entropy: bool,
    positions_per_chunk: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[B, K] logprobs of ``targets`` (and entropies) from [B, K, H] last hidden states, the head run
    ``positions_per_chunk`` positions at a time."""
    import torch
    from torch.utils.checkpoint import checkpoint

    def chunk(hidden_bcH: torch.Tensor, targets_bc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        return target_logprobs(head(hidden_bcH), targets_bc, temperature, entropy)

    grad = torch.is_grad_enabled() and hidden_BKH.requires_grad
    logprobs: list[torch.Tensor] = []
    entropies: list[torch.Tensor] = []  # empty without ``entropy``
    for start in range(0, max(hidden_BKH.shape[1], 1), positions_per_chunk):  # once when there is nothing
        args = (
            hidden_BKH[:, start : start + positions_per_chunk],
            targets_BK[:, start : start + positions_per_chunk],
        )
        logprobs_bc, entropy_bc = checkpoint(chunk, *args, use_reentrant=False) if grad else chunk(*args)
        logprobs.append(logprobs_bc)
        if entropy_bc is not None:
            entropies.append(entropy_bc)
    return torch.cat(logprobs, dim=1), torch.cat(entropies, dim=1) if entropy else None
