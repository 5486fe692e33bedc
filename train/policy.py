"""The policy a run trains: the model (its LoRA adapter, under ``model.lora``), the KL term's reference,
the optimiser and the schedule, loaded and prepared by ``accelerate``; ``Policy.learn`` is one update."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envs.backends.base import TrainingBackend
from envs.models import resolve_model
from envs.models.loading import load_causal_lm
from train.batching import rollouts_to_batch
from train.config import ModelConfig, TrainConfig, deepspeed_launched
from train.lora import AdapterOff, adapt, save_adapter_checkpoints
from train.orchestrator import StepRollouts

if TYPE_CHECKING:  # torch, accelerate and transformers load inside the functions that use them
    import torch
    from accelerate import Accelerator
    from transformers import PreTrainedTokenizerBase


@dataclass
class Policy:
    """The model being trained and what updates it."""

    model: torch.nn.Module
    """The prepared (accelerate-wrapped) policy."""
    ref_model: torch.nn.Module | AdapterOff | None
    """The frozen reference model of the KL term (``loss.beta > 0``), else None; under LoRA the policy with
    its adapter off (``train.lora.AdapterOff``), not a second model."""
    optimizer: torch.optim.Optimizer
    """AdamW over the policy's trainable parameters: all of them, or the LoRA adapter's (prepared)."""
    scheduler: torch.optim.lr_scheduler.LRScheduler
    """The learning-rate schedule (prepared; stepped once per optimiser step)."""
    tokenizer: PreTrainedTokenizerBase
    """The policy's tokenizer."""
    model_dir: Path
    """The local folder the policy was loaded from."""
    cfg: TrainConfig
    """The run's config (its loss, optimiser and memory settings)."""
    accelerator: Accelerator
    """The accelerator that prepared the model, optimiser and schedule."""

    def learn(self, rollouts: StepRollouts, backend: TrainingBackend, step: int) -> dict[str, float]:
        """One policy update on ``step``'s kept groups; returns the step's loss statistics. Runs on the
        run's torch thread, which the local backend samples on too, so it tells the backend the weights
        changed before any queued generation runs."""
        from train.step import train_step  # imports torch

        cfg, accelerator = self.cfg, self.accelerator
        pad = self.tokenizer.pad_token_id or 0
        batch = rollouts_to_batch(rollouts.kept_groups, pad, cfg.loss.mask_truncated_completions)
        # generation may run ahead: the weights never change under it (train_step holds the lock to step)
        args = (
            self.model,
            self.ref_model,
            batch,
            cfg,
            accelerator,
            self.optimizer,
            self.scheduler,
            backend.lock,
        )
        stats = train_step(*args)
        backend.weights_changed(step + 1)
        return stats


def load_policy(cfg: TrainConfig, accelerator: Accelerator) -> Policy:
    """The policy, its reference model, optimiser and schedule, prepared by ``accelerator``."""
    import torch
    from transformers import AutoTokenizer, get_scheduler

    model_dir = resolve_model(cfg.model.name_or_path)
    dtype = getattr(torch, cfg.model.dtype)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = load_causal_lm(model_dir, dtype=dtype, attn_implementation=cfg.model.attn_implementation)
    if cfg.model.lora is not None:  # only the adapter trains (train.lora)
        model = adapt(model, cfg.model.lora)
    check_updates_land(model, cfg.model, cfg.optim.learning_rate)
    if cfg.model.gradient_checkpointing:
        # transformers 5.25 renamed it; the old name warns on every run (older versions have only it)
        getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    ref_model = None
    if cfg.loss.beta > 0 and cfg.model.lora is None:
        ref_model = load_causal_lm(model_dir, dtype=dtype).eval().requires_grad_(False)
        ref_model = ref_model.to(accelerator.device)
    optim = cfg.optim
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = adamw(trainable, optim.learning_rate, optim.adam_betas, optim.weight_decay)
    scheduler = get_scheduler(optim.schedule, optimizer, optim.warmup_steps, cfg.max_steps)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    keep_autocast_outputs(accelerator.unwrap_model(model))
    if cfg.model.lora is not None:  # the reference is the policy with its adapter off: no second model
        ref_model = AdapterOff(accelerator.unwrap_model(model)) if cfg.loss.beta > 0 else None
        save_adapter_checkpoints(accelerator)
    return Policy(model, ref_model, optimizer, scheduler, tokenizer, model_dir, cfg, accelerator)


def adamw(
    params: list[torch.nn.Parameter], lr: float, betas: tuple[float, float], weight_decay: float
) -> torch.optim.AdamW:
    """AdamW over ``params``, fused into one kernel per parameter (``fused=True``) where torch has that
    kernel for all of them (floating weights on a CPU or a CUDA device), else torch's default
    (``foreach``). The fused kernel passes over each weight, gradient and moment once per step instead of
    once per operation: 0.17 s against 0.32 s for SmolLM2-135M's step on a 2-core CPU
    (``benchmarks/optimizer_step.py``, docs/results.md). It is TRL's default too (transformers'
    ``adamw_torch_fused``). The update is the same up to float rounding."""
    import torch

    fusable = bool(params) and all(
        p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.bfloat16, torch.float16)
        for p in params
    )
    return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay, fused=fusable or None)


def keep_autocast_outputs(model: torch.nn.Module) -> bool:
    """Drop the float32 cast that ``accelerate``'s mixed precision adds after the policy's forward (its
    forward stays under autocast); True if there was one. That cast copies the whole [B, K, V] logits to
    float32, and its backward casts their gradient back: both are redundant, since the loss
    (``train.loss.target_logprobs``) takes the logits in float32 a chunk at a time, with the same values."""
    from types import MethodType

    from accelerate.utils.operations import ConvertOutputsToFp32

    forward = model.__dict__.get("forward")
    converter = getattr(getattr(forward, "__func__", None), "__wrapped__", None)
    if not isinstance(converter, ConvertOutputsToFp32):
        return False
    model.forward = MethodType(converter.model_forward, model)
    return True


MANTISSA_BITS = {"bfloat16": 7, "float16": 10}
"""Explicit mantissa bits of the half-precision dtypes: a weight ``w`` moves only by at least half a unit
in the last place, ``|w| * 2**-(bits + 1)``."""


def check_updates_land(
    model: torch.nn.Module, model_cfg: ModelConfig, lr: float, max_lost: float = 0.5
) -> None:
    """Refuse a run whose AdamW updates would round away: pure half-precision weights (no fp32 master copy)
    at a learning rate below half a unit in the last place of most weights. AdamW moves a weight by about
    the learning rate per step, so with bf16 weights of magnitude 0.02 anything below ~8e-5 is lost.
    DeepSpeed keeps fp32 master weights of its own, so its launches are not checked."""
    import torch

    dtype = model_cfg.dtype
    bits = MANTISSA_BITS.get(dtype)
    if bits is None or deepspeed_launched():
        return
    lost = total = 0
    with torch.no_grad():
        for p in model.parameters():  # under LoRA: the adapter alone (peft keeps it in float32)
            if not p.requires_grad or p.dtype != getattr(torch, dtype):
                continue
            lost += int((p.detach().abs().float() * 2.0 ** -(bits + 1) > lr).sum())
            total += p.numel()
    if lost > max_lost * total:
        raise ValueError(
            f"model.dtype: {dtype} weights with AdamW at optim.learning_rate {lr:g}: the updates of "
            f"{lost / total:.0%} of the parameters are smaller than half a {dtype} step and round "
            "away, so the policy barely moves; train float32 weights with bf16 autocast instead "
            "(model.dtype: float32, model.mixed_precision: bf16), or raise the learning rate"
        )
