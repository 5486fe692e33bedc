"""The memory plan's verdict: the table, the refusal of a run that cannot fit its device with the fields
that would make it fit, and where the plan is made: the trainer's start (``check_at_start``, before any
model loads) and ``rubric-grpo plan CONFIG --gpu-memory GIB`` (``make_setup`` with a stated size).

A run on a GPU is refused when its plan's peak exceeds ``FIT_FRACTION`` of the GPU's memory; a run on a CPU
only when the processes' peaks together exceed that share of the host's physical memory (``MemTotal``):
the host's memory is shared with other work and swap may stretch it, so its free memory says little.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from train.backend_kinds import GIB, backend_kind
from train.config import TrainConfig
from train.config_files import apply_override
from train.memory_plan import FIT_FRACTION, MemoryPlan, estimate, read_shapes
from train.plan_inputs import ModelShapes, Setup

if TYPE_CHECKING:  # accelerate loads only where the trainer makes its Accelerator
    from accelerate import Accelerator

ZERO2_CONFIG = "configs/accelerate/deepspeed_zero2.yaml"
ZERO3_CONFIG = "configs/accelerate/deepspeed_zero3.yaml"


class MemoryPlanError(ValueError):
    """The run is estimated not to fit its device; the message names the fields that would make it fit."""


def format_table(plan: MemoryPlan) -> str:
    """The plan as a fixed-width table in GiB, its peak and, with a device size, the verdict."""
    setup = plan.setup
    launch = f"{setup.processes} process{'es' if setup.processes > 1 else ''}" + (
        f", ZeRO-{setup.zero_stage}" if setup.zero_stage else ""
    )
    lines = [f"memory plan per process ({launch}, mixed precision {setup.mixed_precision}):"]
    titles = {"held": "held throughout", "step": "training step", "generation": "generation"}
    for part, title in titles.items():
        lines.append(f"  {title:<40} {plan.part(part) / GIB:>9.2f} GiB")
        for row in (r for r in plan.rows if r.part == part):
            lines.append(f"    {row.name:<38} {row.bytes / GIB:>9.2f} GiB  {row.note}")
    lines.append(f"  {'peak (held + the larger of the two)':<40} {plan.peak / GIB:>9.2f} GiB")
    if plan.budget is not None and setup.device_bytes is not None:
        verdict = "fits" if plan.fits else "does NOT fit"
        lines.append(
            f"  {verdict}: {FIT_FRACTION:.0%} of {setup.device_bytes / GIB:.1f} GiB ({setup.device}) "
            f"is {plan.budget / GIB:.2f} GiB per process"
        )
        engine = any(row.name.startswith("engine") for row in plan.rows)  # a colocated engine generates
        if plan.part("generation") == 0 and setup.device != "cpu" and not engine:  # vLLM servers generate
            share = max(0.0, FIT_FRACTION - plan.peak / setup.device_bytes)
            lines.append(f"  a vLLM server on the same GPU: --gpu-memory-utilization {share:.2f} at most")
    return "\n".join(lines)


def _variant(cfg: TrainConfig, overrides: list[str]) -> TrainConfig | None:
    """``cfg`` with ``section.field=value`` changes, or None when the result is not a valid config."""
    data = cfg.model_dump()
    for override in overrides:
        apply_override(data, override)
    try:
        return TrainConfig.model_validate(data)
    except ValueError:
        return None


def _lora(c: TrainConfig) -> list[str]:
    """An adapter; the warm start, which LoRA refuses, goes (a warm-started model is the starting point)."""
    if c.model.lora is not None:
        return []
    return ["model.lora={}", *(["warm_start.demonstrations=null"] if c.warm_start.demonstrations else [])]


CHANGES: list[Callable[[TrainConfig], list[str]]] = [
    _lora,
    # a frozen base needs no float32 master: peft keeps the adapter in float32 over it
    lambda c: ["model.dtype=bfloat16"] if c.model.lora is not None and c.model.dtype == "float32" else [],
    lambda c: [] if c.model.gradient_checkpointing else ["model.gradient_checkpointing=true"],
    lambda c: ["optim.micro_batch_size=1"] if c.optim.micro_batch_size > 1 else [],
    lambda c: [] if c.optim.logits_chunk_tokens else ["optim.logits_chunk_tokens=512"],
]
"""The run config's changes ``remedies`` tries, in order: each gives the overrides it would make (none
where it does not apply)."""


def remedies(cfg: TrainConfig, shapes: ModelShapes, plan: MemoryPlan) -> list[str]:
    """The changes that make ``plan`` fit, each with the peak it gives: ``CHANGES`` taken one after another
    (each kept only when it lowers the peak, stopping once the plan fits), then the ZeRO stage over two
    processes as an alternative."""
    out: list[str] = []
    current, peak = cfg, plan.peak
    for change in CHANGES:
        overrides = change(current)
        changed = _variant(current, overrides) if overrides else None
        if changed is None or (lower := estimate(changed, shapes, plan.setup).peak) >= peak:
            continue
        current, peak = changed, lower
        fits = plan.budget is not None and peak <= plan.budget
        label = " and ".join(o.replace("=", ": ") for o in overrides)
        out.append(f"{'then ' if out else ''}{label} ({peak / GIB:.1f} GiB{': fits' if fits else ''})")
        if fits:
            break
    stage = backend_kind(cfg.rollout).zero_stage_remedy
    accelerate_config = ZERO3_CONFIG if stage == 3 else ZERO2_CONFIG
    zero = replace(plan.setup, zero_stage=stage, processes=max(2, plan.setup.processes))
    if plan.setup.zero_stage < stage and (lower := estimate(cfg, shapes, zero).peak) < plan.peak:
        out.append(
            f"or the ZeRO stage: ZeRO-{stage} over {zero.processes} GPUs "
            f"(accelerate launch --config_file {accelerate_config}; {lower / GIB:.1f} GiB each)"
        )
    return out


def check_fits(cfg: TrainConfig, shapes: ModelShapes, plan: MemoryPlan) -> None:
    """Raise ``MemoryPlanError`` naming the fields to change when ``plan`` does not fit its device."""
    if plan.fits is not False:
        return
    assert plan.budget is not None
    fixes = remedies(cfg, shapes, plan)
    raise MemoryPlanError(
        f"memory plan: the estimated peak {plan.peak / GIB:.1f} GiB per process exceeds "
        f"{plan.budget / GIB:.1f} GiB ({FIT_FRACTION:.0%} of the {setup_name(plan.setup)}); change "
        + (", ".join(fixes) if fixes else "the model (no field of the config makes it fit)")
    )


def setup_name(setup: Setup) -> str:
    """The device in words, for messages."""
    size = (setup.device_bytes or 0) / GIB
    return {"cuda": f"GPU's {size:.1f} GiB", "cpu": f"host's {size:.1f} GiB"}.get(
        setup.device, f"stated {size:.1f} GiB"
    )


def model_config_json(cfg: TrainConfig) -> Path:
    """The ``config.json`` of ``model.name_or_path`` (``smollm2`` is prepared first, as the trainer would)."""
    from envs.models import resolve_model

    return resolve_model(cfg.model.name_or_path) / "config.json"


def make_setup(
    cfg: TrainConfig, processes: int = 1, zero_stage: int = 0, gpu_memory_gib: float | None = None
) -> Setup:
    """The setup of ``cfg`` on a GPU of ``gpu_memory_gib`` (``auto`` precisions taken as a GPU with bf16
    takes them), or without it on this host: its GPU, else its CPU and physical memory."""
    import torch

    from train.distributed import resolve_inference_dtype, resolve_mixed_precision

    size: int | None
    if gpu_memory_gib is not None:
        auto = {"auto": "bf16"}.get(cfg.model.mixed_precision, cfg.model.mixed_precision)
        sampling = {"auto": "bfloat16"}.get(str(cfg.rollout.inference_dtype), cfg.rollout.inference_dtype)
        device, size = "stated", int(gpu_memory_gib * GIB)
    else:
        auto = resolve_mixed_precision(cfg.model.mixed_precision)
        sampling = resolve_inference_dtype(cfg.rollout.inference_dtype)
        cuda = torch.cuda.is_available()
        device = "cuda" if cuda else "cpu"
        size = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory if cuda else _host()
    mixed = "no" if zero_stage else auto  # DeepSpeed takes its precision from its own config
    return Setup(
        device, size, processes, zero_stage, mixed, backend_kind(cfg.rollout).sampling_dtype(sampling)
    )


def _host() -> int | None:
    """This host's physical memory in bytes (Linux ``MemTotal``), or None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_at_start(cfg: TrainConfig, accelerator: Accelerator) -> MemoryPlan | None:
    """The trainer's start, before any model loads: print the plan on the main process, and refuse
    (``MemoryPlanError``) a run estimated not to fit this process's GPU, or a CPU run estimated beyond the
    host's physical memory. An architecture the plan cannot read is said so, and the run goes on."""
    from train.config import launched_zero_stage

    try:
        shapes = read_shapes(model_config_json(cfg))
    except ValueError as exc:
        if accelerator.is_main_process:
            print(f"memory plan: none: {exc}", flush=True)
        return None
    setup = make_setup(cfg, accelerator.num_processes, launched_zero_stage() or 0)
    plan = estimate(cfg, shapes, setup)
    if accelerator.is_main_process:
        print(format_table(plan), flush=True)
    check_fits(cfg, shapes, plan)
    return plan
