"""One optimiser step on a ``TrainBatch``: micro-batched forward/backward, clipping, AdamW, schedule.

The loss of every micro-batch is normalised against the whole step (tokens or sequences of all
micro-batches on all processes), so gradient accumulation gives the same update as one big batch.
Old logprobs are the current policy's (one update per batch: the ratio starts at 1 and clipping guards the
step); the truncated importance weights correct for the inference engine's logprobs.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from train.config import TrainConfig
from train.distributed import backward, is_deepspeed
from train.forward import (
    PrefixCluster,
    forward_cost,
    forward_logprobs,
    packed_forward_logprobs,
    prefix_clusters,
)
from train.loss import importance_weights, policy_loss
from train.micro_batches import (
    MicroBatchPlan,
    loaded_attn_implementation,
    packs_sequences,
    plan_micro_batches,
    take_rows,
)
from train.types import TrainBatch

if TYPE_CHECKING:  # imported inside the functions (importing this module stays light)
    import torch
    from accelerate import Accelerator

    from train.forward import Model


@dataclass(frozen=True)
class StepCounts:
    """What every process must agree on before its micro-batches run."""

    tokens: float
    """Loss tokens of the whole optimiser step, all processes together."""
    sequences: float
    """Sequences of the whole optimiser step, all processes together."""
    micro_batches: int
    """Micro-batches of the busiest process: every process runs this many."""


def step_counts(batch: TrainBatch | None, local_micro_batches: int, accelerator: Accelerator) -> StepCounts:
    """Reduce the local counts of ``batch`` (None: nothing to train here) and its number of micro-batches
    over all processes."""
    import torch

    local = [
        float(batch.num_loss_tokens if batch else 0),
        float(batch.num_sequences if batch else 0),
        float(local_micro_batches),
    ]
    counts = torch.tensor(local, device=accelerator.device)
    total_tokens, total_sequences = accelerator.reduce(counts[:2], "sum").tolist()
    n_micro = int(accelerator.reduce(counts[2:], "max").item())
    return StepCounts(total_tokens, total_sequences, n_micro)


def micro_batch(batch: TrainBatch | None, plan: MicroBatchPlan, i: int, device: torch.device) -> TrainBatch:
    """Micro-batch ``i`` of ``batch`` (its rows already in ``plan.order``) on ``device``; an empty one past
    the end of this process's plan."""
    if batch is None or i >= len(plan.bounds):
        return _empty(device).to(device)
    start, stop = plan.bounds[i]
    return batch.slice(start, stop).to(device)


def step_plan(
    batch: TrainBatch | None, model: torch.nn.Module, cfg: TrainConfig
) -> tuple[TrainBatch | None, MicroBatchPlan]:
    """This process's micro-batches (``train.micro_batches``) and its batch with the rows in their order."""
    if batch is None:
        return None, MicroBatchPlan([], [], False)
    tokens = cfg.optim.micro_batch_tokens
    packed = packs_sequences(loaded_attn_implementation(model), tokens)
    lengths_B = [int(n) for n in batch.attention_mask_BT.sum(dim=1).tolist()]
    plan = plan_micro_batches(lengths_B, cfg.optim.micro_batch_size, tokens, packed)
    return (take_rows(batch, plan.order) if tokens > 0 else batch), plan


def sequence_logprobs(
    model: Model,
    mb: TrainBatch,
    cfg: TrainConfig,
    packed: bool,
    clusters: Sequence[PrefixCluster] | None,
    entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``[B, T]`` logprobs of the micro-batch's tokens under ``model`` at the sampling temperature (and their
    entropies when ``entropy``): padding-free when ``packed``, each shared prompt once with ``clusters``."""
    temperature, chunk = cfg.rollout.temperature, cfg.optim.logits_chunk_tokens
    if packed:
        return packed_forward_logprobs(model, mb, temperature, entropy, chunk)
    return forward_logprobs(model, mb, temperature, entropy, chunk, clusters)


def micro_batch_loss(
    model: Model,
    ref_model: Model | None,
    mb: TrainBatch,
    cfg: TrainConfig,
    accelerator: Accelerator,
    counts: StepCounts,
    packed: bool = False,
    clusters: Sequence[PrefixCluster] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, float]]:
    """The micro-batch's share of the step's loss (scalar), its [B, T] entropies, its [B, T] logprobs before
    the update (detached) and its loss and importance-sampling statistics; ``packed``: the forwards run
    padding-free (``packed_forward_logprobs``); ``clusters``: they run each shared prompt once
    (``shared_prefix_forward``)."""
    import torch

    logprobs_BT, entropy_BT = sequence_logprobs(model, mb, cfg, packed, clusters, entropy=True)
    assert entropy_BT is not None  # the forward computes entropies unless told not to
    old_logprobs_BT = logprobs_BT.detach()
    is_weights_BT, is_stats = None, dict[str, float]()
    if cfg.loss.importance_sampling:
        is_weights_BT, is_stats = importance_weights(
            old_logprobs_BT, mb.inference_logprobs_BT, mb.loss_mask_BT, cfg.loss.importance_sampling_cap
        )
    ref_logprobs_BT = None
    if ref_model is not None:
        with torch.no_grad(), accelerator.autocast():  # the policy's precision
            ref_logprobs_BT, _ = sequence_logprobs(ref_model, mb, cfg, packed, clusters, entropy=False)
    loss, stats = policy_loss(
        logprobs_BT,
        old_logprobs_BT,
        mb.advantages_BT,
        mb.loss_mask_BT,
        cfg.loss,
        ref_logprobs_BT=ref_logprobs_BT,
        is_weights_BT=is_weights_BT,
        num_items_in_batch=max(counts.tokens, 1.0),
        num_sequences_in_batch=max(counts.sequences, 1.0),
    )
    return loss, entropy_BT, old_logprobs_BT, {**stats, **is_stats}


def _accumulate(
    sums: dict[str, float],
    weights: dict[str, float],
    mb: TrainBatch,
    loss: torch.Tensor,
    entropy_BT: torch.Tensor,
    stats: dict[str, float],
) -> None:
    """Add one micro-batch's statistics: token-weighted, the loss summed (it is already the step's share)."""
    tokens = float(mb.loss_mask_BT.sum().item())
    for key, value in stats.items():
        sums[key] += float(value) * tokens
        weights[key] += tokens
    sums["loss"] += float(loss.item())
    weights["loss"] = 1.0
    mask = mb.loss_mask_BT
    sums["entropy"] += float((entropy_BT * mask).sum().item())
    weights["entropy"] += tokens


def train_step(
    model: torch.nn.Module,
    ref_model: Model | None,
    batch: TrainBatch | None,
    cfg: TrainConfig,
    accelerator: Accelerator,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    weights_lock: contextlib.AbstractContextManager[Any] | None = None,
) -> dict[str, float]:
    """Forward, backward and one optimiser step; returns the step's loss statistics.

    ``batch`` may be None on a process with nothing to train this step (all its groups dropped). Every
    process runs as many micro-batches as the busiest one (padding with empty ones that add nothing), so
    the gradient collectives of DDP and DeepSpeed always pair up; when no process has anything, only the
    schedule moves."""
    deepspeed = is_deepspeed(accelerator)
    batch, plan = step_plan(batch, model, cfg)
    counts = step_counts(batch, len(plan.bounds), accelerator)
    if counts.micro_batches == 0:
        return _schedule_only(scheduler)
    sums: dict[str, float] = defaultdict(float)
    weights: dict[str, float] = defaultdict(float)
    checked: list[Checked] = []  # logging.update_check
    model.train()
    for i in range(counts.micro_batches):
        mb = micro_batch(batch, plan, i, accelerator.device)
        packed = plan.packed and i < len(plan.bounds)
        # once per micro-batch (reading the rows to the host): the policy's and the reference's
        # forwards share it
        clusters = prefix_clusters(mb) if cfg.optim.share_prefix and not packed else None
        loss, entropy_BT, old_logprobs_BT, stats = micro_batch_loss(
            model, ref_model, mb, cfg, accelerator, counts, packed, clusters
        )
        if cfg.logging.update_check and i < len(plan.bounds):
            checked.append((mb, packed, clusters, old_logprobs_BT))
        # DDP/DeepSpeed average gradients over processes; the normaliser already counts all of them.
        # DeepSpeed clips and steps the optimiser inside the last micro-batch's backward: hold the lock there.
        last = i == counts.micro_batches - 1
        with weights_lock if last and deepspeed and weights_lock is not None else contextlib.nullcontext():
            backward(accelerator, loss * accelerator.num_processes, last_micro_batch=last)
        _accumulate(sums, weights, mb, loss, entropy_BT, stats)
        calls, positions = (1, int(mb.attention_mask_BT.sum())) if packed else forward_cost(mb, clusters)
        sums["forward_calls"] += calls
        sums["padded_tokens"] += positions
    grad_norm = accelerator.clip_grad_norm_(model.parameters(), cfg.optim.max_grad_norm)
    with weights_lock if weights_lock is not None else contextlib.nullcontext():
        optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    out = {k: sums[k] / weights[k] for k in sums if weights[k] > 0}
    if checked:
        out.update(update_check(model, checked, cfg))
    out["grad_norm"] = float(grad_norm) if grad_norm is not None else float("nan")
    return {**out, **_step_counters(sums, counts, scheduler, ref_model is not None)}


def _schedule_only(scheduler: torch.optim.lr_scheduler.LRScheduler) -> dict[str, float]:
    """A step with nothing to train on any process: only the schedule moves."""
    with warnings.catch_warnings():
        # The schedule counts trainer steps, so a step without an update moves it on purpose; torch warns
        # that the first value of the schedule is then skipped, which here is what is meant.
        warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before")
        scheduler.step()
    return {"skipped": 1.0, "learning_rate": float(scheduler.get_last_lr()[0])}


def _step_counters(
    sums: dict[str, float], counts: StepCounts, scheduler: torch.optim.lr_scheduler.LRScheduler, kl: bool
) -> dict[str, float]:
    """The step's learning rate, tokens, micro-batches, and the model forward calls on this process: the
    policy's (two per shared prompt with ``optim.share_prefix``), as many again for the reference with a KL
    term (``kl``); old logprobs take none (one update per batch: they are the current ones, detached). And the
    positions the policy's passes ran over, on this process."""
    return {
        "learning_rate": float(scheduler.get_last_lr()[0]),
        "loss_tokens": counts.tokens,
        "micro_batches": float(counts.micro_batches),
        "forwards": sums["forward_calls"] * (2 if kl else 1),
        "padded_tokens": sums["padded_tokens"],
    }


Checked = tuple[TrainBatch, bool, "Sequence[PrefixCluster] | None", "torch.Tensor"]
"""A micro-batch ``update_check`` runs again: the batch, whether it ran packed, its prefix clusters, and its
``[B, T]`` logprobs before the update."""


def update_check(
    model: Model,
    checked: Sequence[Checked],
    cfg: TrainConfig,
) -> dict[str, float]:
    """How the step's own update moved the logprobs of the tokens it trained on (``logging.update_check``):
    each micro-batch (with its logprobs before the update) runs again through the updated policy, without
    gradient. ``update/logp_delta_pos`` and ``update/logp_delta_neg``: the mean change of a token's logprob
    over the tokens of positive and of negative advantage (an update that moves the right way raises the
    first and lowers the second); ``update/right_direction_frac``: the share of sequences with a nonzero
    advantage whose mean logprob moved with its sign."""
    import torch

    sums = {"pos": 0.0, "neg": 0.0, "n_pos": 0.0, "n_neg": 0.0, "right": 0.0, "seqs": 0.0}
    with torch.no_grad():  # in train mode, as the logprobs before were computed
        for mb, packed, clusters, before_BT in checked:
            after_BT, _ = sequence_logprobs(model, mb, cfg, packed, clusters, entropy=False)
            mask_BT = mb.loss_mask_BT.to(after_BT.dtype)
            delta_BT = (after_BT - before_BT) * mask_BT
            adv = mb.advantages_BT.to(after_BT.dtype)
            adv_BT = adv.unsqueeze(1).expand_as(delta_BT) if adv.dim() == 1 else adv
            pos_BT, neg_BT = mask_BT * (adv_BT > 0), mask_BT * (adv_BT < 0)
            sums["pos"] += float((delta_BT * pos_BT).sum())
            sums["neg"] += float((delta_BT * neg_BT).sum())
            sums["n_pos"] += float(pos_BT.sum())
            sums["n_neg"] += float(neg_BT.sum())
            tokens_B = mask_BT.sum(-1).clamp(min=1.0)
            seq_delta_B, seq_adv_B = delta_BT.sum(-1) / tokens_B, (adv_BT * mask_BT).sum(-1) / tokens_B
            moved_B = seq_adv_B != 0
            sums["right"] += float(((seq_delta_B * seq_adv_B > 0) & moved_B).sum())
            sums["seqs"] += float(moved_B.sum())
    out = {}
    if sums["n_pos"]:
        out["update/logp_delta_pos"] = sums["pos"] / sums["n_pos"]
    if sums["n_neg"]:
        out["update/logp_delta_neg"] = sums["neg"] / sums["n_neg"]
    if sums["seqs"]:
        out["update/right_direction_frac"] = sums["right"] / sums["seqs"]
    return out


def _empty(device: torch.device) -> TrainBatch:
    """A one-token micro-batch with an empty loss mask: a forward/backward that contributes nothing."""
    import torch

    zeros = torch.zeros((1, 1), device=device)
    return TrainBatch(
        input_ids_BT=torch.zeros((1, 1), dtype=torch.long, device=device),
        attention_mask_BT=torch.ones((1, 1), dtype=torch.long, device=device),
        loss_mask_BT=zeros,
        inference_logprobs_BT=zeros.clone(),
        advantages_BT=zeros.clone(),
    )
