"""The in-process vLLM engine of the colocated backend (``envs.backends.colocate``): how it is built from the
policy's model folder (``build_engine``, in its dtype, ``engine_dtype``) and how the policy's tensors are
loaded into its worker in memory (``module_by_module`` reads them, one module at a time under ZeRO-3;
``load_into_worker`` runs in the worker; ``is_tied_head`` names the head a checkpoint leaves out)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

from envs.serving.transfer import TensorMeta, dtype_name

ENGINE_DTYPES = ("auto", "float32", "bfloat16", "float16")
"""The dtypes the engine may be built in (``rollout.colocate.dtype``)."""


def on_cuda() -> bool:
    """Whether this process samples on a CUDA GPU (vLLM's CUDA build is installed and sees one)."""
    import torch

    return bool(torch.cuda.is_available())


def engine_dtype(dtype: str) -> str:
    """The engine's dtype: ``auto`` is bfloat16 on a GPU and on a CPU that computes it natively (AVX-512 BF16
    or AMX), float32 on other CPUs (where bf16 is emulated, and slow); the importance-sampling correction
    accounts for a dtype apart from the trainer's, as it does for the local backend's sampling copy."""
    if dtype not in ENGINE_DTYPES:
        raise ValueError(f"engine dtype must be one of {ENGINE_DTYPES}, got {dtype!r}")
    if dtype != "auto":
        return dtype
    import torch

    native = on_cuda() or torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return "bfloat16" if native else "float32"


def build_engine(
    model_dir: str,
    max_model_len: int,
    kv_cache_bytes: int | None,
    dtype: str,
    sleep: bool,
    seed: int,
    max_num_seqs: int,
    max_num_batched_tokens: int | None,
) -> Any:
    """The ``vllm.LLM`` of ``model_dir``, in this process (runs on the backend's thread)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process, not a child
    import torch
    import torch.distributed as dist

    threads = torch.get_num_threads()  # vLLM sets 1 for serving; the trainer's passes want them all
    from vllm import LLM

    kwargs: dict[str, Any] = {
        "model": model_dir,
        "dtype": engine_dtype(dtype),
        "max_model_len": max_model_len,
        "logprobs_mode": "processed_logprobs",
        "seed": seed,
        "max_num_seqs": max_num_seqs,
        "enable_prefix_caching": True,
        "trust_remote_code": False,
    }
    if kv_cache_bytes is not None:
        kwargs["kv_cache_memory_bytes"] = int(kv_cache_bytes)
    if max_num_batched_tokens is not None:
        kwargs["max_num_batched_tokens"] = max_num_batched_tokens
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        kwargs["distributed_executor_backend"] = "external_launcher"  # one replica per rank
    if on_cuda():
        kwargs["enable_sleep_mode"] = sleep
    else:
        kwargs["enforce_eager"] = True  # no graphs to capture on a CPU
    try:
        llm = LLM(**kwargs)
    finally:
        torch.set_num_threads(threads)
    return llm


def module_by_module(module: Any) -> Iterator[tuple[str, Any]]:
    """``(name, tensor)`` for every parameter and persistent buffer of ``module``, in checkpoint names;
    under DeepSpeed ZeRO-3 each submodule's own parameters are gathered while they are read, one module at
    a time (collective: every process calls it), so the whole model is never gathered at once."""
    gather = _zero3_gather()
    for prefix, sub in module.named_modules():
        own = list(sub.named_parameters(recurse=False))
        with gather([p for _, p in own]):
            for name, param in own:
                # a gathered shard's storage is DeepSpeed's to reuse once the module is released: copy it
                tensor = param.detach().clone() if hasattr(param, "ds_id") else param.detach()
                yield (f"{prefix}.{name}" if prefix else name), tensor
        for name, buffer in _persistent_buffers(sub):
            yield (f"{prefix}.{name}" if prefix else name), buffer.detach()


def _persistent_buffers(sub: Any) -> Iterator[tuple[str, Any]]:
    """A module's own buffers that its state dict holds."""
    skipped: set[str] = getattr(sub, "_non_persistent_buffers_set", set())
    return ((name, b) for name, b in sub.named_buffers(recurse=False) if name not in skipped)


def checkpoint_tensors(module: Any) -> Iterator[tuple[str, Any]]:
    """:func:`module_by_module` without a tied output head: what a server loads."""
    return ((name, t) for name, t in module_by_module(module) if not is_tied_head(module, name))


def checkpoint_metadata(module: Any) -> list[TensorMeta]:
    """What :func:`checkpoint_tensors` will yield, in its order, known without gathering anything (a ZeRO-3
    shard keeps its whole shape in ``ds_shape``)."""
    out = []
    for prefix, sub in module.named_modules():
        named = [*sub.named_parameters(recurse=False), *_persistent_buffers(sub)]
        for name, tensor in named:
            shape = tuple(getattr(tensor, "ds_shape", tensor.shape))
            out.append(TensorMeta(f"{prefix}.{name}" if prefix else name, dtype_name(tensor), shape))
    return [meta for meta in out if not is_tied_head(module, meta.name)]


def _zero3_gather() -> Any:
    """``deepspeed.zero.GatheredParameters`` where DeepSpeed is installed (it does nothing for parameters
    that are not ZeRO-3 shards), else a context that does nothing."""
    import contextlib

    try:  # ``deepspeed.zero`` is an attribute of the package, not a module ``from ... import`` finds
        import deepspeed
    except ImportError:
        return lambda params: contextlib.nullcontext()
    return lambda params: (
        deepspeed.zero.GatheredParameters(params, modifier_rank=None) if params else contextlib.nullcontext()
    )


def load_into_worker(worker: Any, weights: Iterator[tuple[str, Any]]) -> float:
    """Runs inside the engine's worker (this process): load checkpoint-format tensors in place (read one at
    a time from ``weights``) and re-tie a tied output head; returns the seconds it took."""
    import torch

    from envs.serving.worker import retie_output_head

    t0 = time.perf_counter()
    with torch.inference_mode():
        worker.reload_weights(weights_iterator=weights, is_checkpoint_format=True)
        retie_output_head(worker.model_runner.get_model())
    return time.perf_counter() - t0


def is_tied_head(module: Any, name: str) -> bool:
    """``lm_head.weight`` of a model that ties it to its input embedding (checkpoints leave it out; the
    worker re-ties it)."""
    base = module.get_base_model() if hasattr(module, "get_base_model") else module
    config: Any = getattr(base, "config", None)
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    return name == "lm_head.weight" and bool(getattr(config, "tie_word_embeddings", False))
