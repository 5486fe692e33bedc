"""The ``Accelerator`` for every way the trainer is started: plain python, ``accelerate launch`` with one or
more processes, DDP, DeepSpeed ZeRO-2/3, on GPUs or on a CPU-only host.

Two accelerate 1.15 behaviours on a CPU-only host need care:
- ``Accelerator(cpu=True)`` silently ignores a DeepSpeed launch (``ACCELERATE_USE_DEEPSPEED``) and runs plain
  DDP; DeepSpeed needs ``cpu=False``.
- with ``cpu=False`` and no GPU, accelerate picks no process-group backend, so every DeepSpeed process
  believes it is process 0 of 1 (DeepSpeed itself does start gloo). Naming the ``gloo`` backend fixes the
  count.

A prepared scheduler is stepped once per optimiser step whatever the number of processes
(``step_scheduler_with_optimizer=False``). DeepSpeed also needs its micro-batch size and clipping set before
``prepare`` (there is no dataloader for accelerate to read them from): they come from the run config.
"""

from __future__ import annotations

import ctypes
import platform
import resource
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from train.config import TrainConfig, deepspeed_launched

if TYPE_CHECKING:  # accelerate and torch load only where a function uses them
    import torch
    from accelerate import Accelerator


def make_accelerator(cfg: TrainConfig) -> Accelerator:
    """An ``Accelerator`` for this process; under DeepSpeed its config gets the run's batch and clipping."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import DistributedType, InitProcessGroupKwargs

    # One scheduler step per optimiser step: by default accelerate steps a prepared scheduler once per
    # process (it assumes a dataloader sharded over the processes), which would run the schedule N times fast.
    common: dict[str, Any] = {"step_scheduler_with_optimizer": False}
    # under DeepSpeed the precision comes from the DeepSpeed config; elsewhere the run config's autocast
    precision = (
        {}
        if deepspeed_launched()
        else {"mixed_precision": resolve_mixed_precision(cfg.model.mixed_precision)}
    )
    if torch.cuda.is_available():
        accelerator = Accelerator(**common, **precision)
    elif deepspeed_launched():
        accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(backend="gloo")], **common)
    else:  # one CPU process, or several over gloo (``--multi_gpu`` or ``--cpu`` on a CPU-only host)
        if precision.get("mixed_precision") == "bf16" and not cpu_has_native_bf16():
            warnings.warn(
                "model.mixed_precision: bf16 on a CPU without AVX-512 BF16 or AMX: bf16 matrix products are "
                "emulated and the training step runs many times slower than in float32; set "
                "model.mixed_precision: 'no' on this machine",
                stacklevel=2,
            )
        accelerator = Accelerator(cpu=True, **common, **precision)
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        ds_config = accelerator.state.deepspeed_plugin.deepspeed_config
        ds_config["train_micro_batch_size_per_gpu"] = cfg.optim.micro_batch_size
        ds_config["gradient_accumulation_steps"] = 1  # the trainer marks the last micro-batch itself
        ds_config["gradient_clipping"] = cfg.optim.max_grad_norm
        ds_config.pop("train_batch_size", None)  # derived by DeepSpeed from the two above
    return accelerator


def resolve_mixed_precision(setting: str) -> str:
    """``model.mixed_precision`` for accelerate: ``auto`` becomes ``bf16`` where the hardware computes it
    natively (a CUDA GPU with bf16; a CPU with AVX-512 BF16 or AMX), ``no`` elsewhere."""
    import torch

    if setting != "auto":
        return setting
    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "no"
    return "bf16" if cpu_has_native_bf16() else "no"


def resolve_inference_dtype(setting: str | None) -> str | None:
    """``rollout.inference_dtype`` for the local backend: ``auto`` becomes ``bfloat16`` where bf16 is computed
    natively (CUDA, or a CPU with AVX-512 BF16 or AMX) and None (sample the policy itself) elsewhere."""
    if setting != "auto":
        return setting
    return "bfloat16" if resolve_mixed_precision("auto") == "bf16" else None


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 matrix products natively (AVX-512 BF16 or AMX); Linux flags only."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True  # unknown: no warning
    return any(flag in flags for flag in (" avx512_bf16", " amx_bf16"))


def backward(accelerator: Accelerator, loss: torch.Tensor, last_micro_batch: bool) -> None:
    """``accelerator.backward``; under DeepSpeed the optimiser steps inside the last micro-batch's backward
    (DeepSpeed clips and steps in ``engine.step``), so earlier micro-batches only accumulate."""
    from accelerate.utils import DistributedType

    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        accelerator.deepspeed_engine_wrapped.backward(loss, sync_gradients=last_micro_batch)
    else:
        accelerator.backward(loss)


def is_deepspeed(accelerator: Accelerator) -> bool:
    """Whether ``accelerator`` runs DeepSpeed (the optimiser step then happens inside ``backward``)."""
    from accelerate.utils import DistributedType

    return bool(accelerator.distributed_type == DistributedType.DEEPSPEED)


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
"""glibc ``mallopt`` parameters (malloc.h)."""


def _libc_function(name: str, argtypes: list[Any], restype: Any = ctypes.c_int) -> Any:
    """The function ``name`` of this process's own C library (glibc), taking ``argtypes`` and returning
    ``restype``, or None off Linux or where the C library has none."""
    if platform.system() != "Linux":
        return None
    try:
        function = getattr(ctypes.CDLL(None), name)  # the process's own C library
    except (OSError, AttributeError):
        return None
    function.argtypes, function.restype = argtypes, restype
    return function


def _mallopt() -> Any:
    """glibc's ``mallopt(param, value)`` of this process, or None off Linux or where the C library has
    none."""
    return _libc_function("mallopt", [ctypes.c_int, ctypes.c_int])


def reuse_freed_memory(mmap_threshold: int = 256 << 20) -> bool:
    """Have glibc's malloc keep freed memory for reuse rather than hand it back to the OS; True if applied.

    By default a block over 128 KiB is mapped afresh and unmapped when freed, and the heap's free top is
    trimmed, so every training step's activations and every decoding step's grown KV cache arrive as new
    pages, each one a page fault (about 3.5 million in 5 generate-and-train rounds of SmolLM2-135M on a
    2-core VM, where a fault costs microseconds). Blocks up to ``mmap_threshold`` then come from the heap,
    which is never trimmed. Peak RSS is unchanged, but the process does not shrink after a peak. Off glibc
    (musl, macOS) this does nothing and returns False."""
    mallopt = _mallopt()
    if mallopt is None:
        return False
    # older glibc refuses a threshold over 32 MiB: fall back to that
    mapped = mallopt(M_MMAP_THRESHOLD, mmap_threshold) or mallopt(M_MMAP_THRESHOLD, 32 << 20)
    return bool(mapped and mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


def single_malloc_arena() -> bool:
    """Have every thread that allocates from now on share glibc's main malloc arena; True if applied.

    By default glibc gives each new thread an arena of its own, up to eight per core. The trainer's threads
    (the rollout worker, the OpenMP teams, the tokenizer's and the loggers') then each hold freed memory the
    others cannot reuse, and the process's peak is the sum of their peaks. One arena (the same as
    ``MALLOC_ARENA_MAX=1``; docs/training.md) lowers the main job's peak without slowing it (docs/results.md,
    ``single_malloc_arena``). Threads that have allocated already keep their arena, so call this before the
    threads start.
    Off glibc this does nothing and returns False."""
    mallopt = _mallopt()
    return bool(mallopt is not None and mallopt(M_ARENA_MAX, 1))


def cap_onednn_caches(capacity: int) -> dict[str, str]:
    """Hold each of oneDNN's caches keyed by tensor shapes to ``capacity`` entries; returns the settings in
    force. oneDNN reads them at its first primitive, so call this before any torch operation; an
    environment variable already set is left as it is.

    Each new shape of a bf16 matrix product adds an entry to oneDNN's primitive cache and one to torch's
    (ideep's) cache of computations, about 0.6 MiB between them, up to 1024 entries each by default; an
    evicted entry frees memory between live ones. Rollouts and micro-batches of varied length bring new
    shapes every step: the main job's peak RSS climbed 0.06 GiB a step (docs/results.md, issue 52)."""
    import os

    names = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
    for name in names:
        os.environ.setdefault(name, str(capacity))
    return {name: os.environ[name] for name in names}


def trim_host_memory() -> bool:
    """Hand every free page of glibc's heaps back to the OS (``malloc_trim(0)``), those between live blocks
    too; True if it released any. ``free`` alone returns only the top of the heap, so memory freed between
    long-lived blocks stays resident. Off glibc this does nothing and returns False."""
    trim = _libc_function("malloc_trim", [ctypes.c_size_t])
    if trim is None:
        return False
    return bool(trim(0))


def tune_host_allocator(cfg: TrainConfig) -> None:
    """The run's settings of glibc's malloc and oneDNN's caches on a CPU: ``single_malloc_arena``,
    ``reuse_freed_memory`` and ``cap_onednn_caches`` where ``cfg`` asks for them (``single_malloc_arena``,
    ``reuse_freed_host_memory``, ``onednn_cache_capacity``)."""
    if cfg.single_malloc_arena:
        single_malloc_arena()
    if cfg.reuse_freed_host_memory:
        reuse_freed_memory()
    if cfg.onednn_cache_capacity is not None:
        cap_onednn_caches(cfg.onednn_cache_capacity)


def peak_rss_gib() -> float:
    """This process's peak resident memory so far in GiB: what ``/usr/bin/time`` reports as its maximum."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kibibytes; bytes on macOS
    return rss / (2**30 if sys.platform == "darwin" else 2**20)


def rss_gib() -> float | None:
    """This process's resident memory now in GiB (``VmRSS``, read from ``/proc/self/statm``); None where
    there is no ``/proc`` (macOS). Unlike ``peak_rss_gib`` it falls when memory is handed back, so a steady
    climb of it over steps is memory held, not a new peak."""
    try:
        resident_pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return resident_pages * resource.getpagesize() / 2**30


class MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (malloc.h, glibc 2.33 on): the main arena's heap, the mmapped blocks."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")
    ]  # fmt: skip


def mallinfo2() -> MallInfo2 | None:
    """glibc's ``mallinfo2()`` now, or None off glibc or before 2.33."""
    function = _libc_function("mallinfo2", [], MallInfo2)
    return None if function is None else function()


def heap_gib() -> dict[str, float]:
    """glibc's malloc now, in GiB: ``memory/heap_in_use_gib``, the bytes of live blocks (the heap's and the
    mmapped ones), and ``memory/heap_free_gib``, the free bytes inside the heap, resident until reused or
    trimmed (``trim_host_memory``). Empty off glibc or before 2.33 (no ``mallinfo2``). It counts the main
    arena only: every thread's, where the run keeps one arena (``single_malloc_arena``).

    RSS rising with the bytes in use is memory something holds (a cache, a leak); rising with the free
    bytes, memory the allocator keeps between live blocks (docs/results.md, Host memory over a long run)."""
    info = mallinfo2()
    if info is None:
        return {}
    return {
        "memory/heap_in_use_gib": (info.uordblks + info.hblkhd) / 2**30,
        "memory/heap_free_gib": info.fordblks / 2**30,
    }


def memory_gib() -> dict[str, float]:
    """The memory metrics logged every step, in GiB: ``memory/peak_rss_gib`` (``peak_rss_gib``),
    ``memory/rss_gib`` (``rss_gib``, where the OS tells it), glibc's heap (``heap_gib``), and on CUDA this
    process's GPU's peak allocated memory (``memory/peak_gpu_gib``), the memory its tensors hold now
    (``memory/gpu_allocated_gib``) and what torch's caching allocator holds (``memory/gpu_reserved_gib``)."""
    import torch

    out = {"memory/peak_rss_gib": peak_rss_gib()}
    now = rss_gib()
    if now is not None:
        out["memory/rss_gib"] = now
    out.update(heap_gib())
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        out["memory/peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30
        out["memory/gpu_allocated_gib"] = torch.cuda.memory_allocated() / 2**30
        out["memory/gpu_reserved_gib"] = torch.cuda.memory_reserved() / 2**30
    return out
