"""The colocated vLLM backend: a ``vllm.LLM`` engine inside the training process (``rollout.backend:
vllm_colocate``), as TRL's ``vllm_mode="colocate"`` and verl's hybrid engine run it.

- **One engine, no server.** The engine is built from the policy's own model folder, in this process
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: vLLM's engine core and its one worker run in the caller, so a
  weight update is a function call that hands over tensors, never a file or a socket).
- **Token ids in and out**, as the server backend: each ``generate`` adds one request (its ``n`` samples)
  to the engine, and one driver steps the engine while any request is unfinished, so the requests of
  concurrent rollouts, and each new turn of a multi-turn rollout, join the running batch (continuous
  batching). Logprobs are ``processed_logprobs``: ``log_softmax(logits / temperature)``, the trainer's
  convention (see :mod:`envs.backends.vllm` for the ``top_p`` caveat).
- **One thread.** Every call into the engine (building it, each step, each weight load) runs on
  ``executor``: the trainer's torch thread, so that generation and training take turns on one OpenMP team
  (``train.threads``) and the weights never change in the middle of an engine step.
- **Weights in memory.** ``sync_weights`` hands the policy's tensors to the engine's worker, which loads
  them with vLLM's in-place reload (``reload_weights``: each layer's weights loaded and its kernels
  rebuilt) and re-ties a tied output head (``envs.serving.worker.retie_output_head``); the prefix cache is
  reset. Under DeepSpeed ZeRO-3 the parameters are gathered one module at a time
  (:func:`module_by_module`), never the whole model. A LoRA policy hands over its merged weights
  (``W + B @ A * alpha / r``, ``envs.models.adapters.merged_weights``), without files.
- **Sleep mode** (CUDA only: vLLM's allocator hooks exist only there). ``sleep`` on: the engine is
  built with ``enable_sleep_mode``; ``release`` (the trainer calls it before each training pass) puts it
  to sleep at level 1 (weights kept in host memory, KV cache freed), and the next weight load or request
  wakes it: the weights first, then the KV cache. On a CPU there is no device memory to give back, and
  ``sleep`` does nothing.
- **Several processes** (``accelerate launch``): every process builds its own engine on its own device
  and samples its own share of the groups, as the trainer shards the examples for every backend; the
  engines share nothing (``distributed_executor_backend="external_launcher"`` when a process group
  exists, one replica a rank). Rank 0 alone sampling for all would leave the other GPUs idle for the whole
  rollout phase and send every rollout through one engine.

The engine's memory is what the run's memory plan gives it: ``kv_cache_bytes`` for its KV cache (the
plan's "KV cache" row: every rollout of a step at ``env.max_total_tokens``), on a CPU as on a GPU.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import math
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envs.backends.base import (
    BackendError,
    Sample,
    SamplingParams,
    WeightSource,
    compare_greedy,
    sync_check_prompt,
)
from envs.backends.vllm_engine import (
    build_engine,
    engine_dtype,
    is_tied_head,
    load_into_worker,
    module_by_module,
    on_cuda,
)
from envs.models.adapters import is_adapted, merged_weights

if TYPE_CHECKING:
    from envs.backends.decode import DecodeStats

DTYPE_GAP = 0.5
"""Nats a greedy token of an engine in another dtype than the policy's may lie below the policy's best token,
and its logprob from the policy's (``ColocatedVllmBackend.check_sync``)."""


@dataclass
class _Request:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    future: asyncio.Future[list[Sample]] = field(repr=False)
    version: int = 0


class ColocatedVllmBackend:
    """Sampling with a ``vllm.LLM`` engine held in the training process; weights updated in memory.

    Args:
        model_dir: The policy's model folder (the engine loads it once; later weights come from memory).
        tokenizer: The policy's tokenizer (end-of-sequence ids and the sync check).
        max_model_len: Longest prompt plus completion (the run's ``env.max_total_tokens``).
        kv_cache_bytes: The engine's KV cache; None: vLLM's default share of the device.
        executor: The thread every engine call runs on (the trainer's torch thread); its own when None.
        dtype: ``auto`` (:func:`engine_dtype`), or one of ``ENGINE_DTYPES``.
        sleep: On CUDA, release the engine's memory while the policy trains (``release``).
        seed: The engine's seed (requests with a ``seed`` of their own are reproducible from it).
        max_num_seqs: Most sequences the engine decodes together.
        max_num_batched_tokens: Most tokens one engine step runs (None: vLLM's default).
    """

    def __init__(
        self,
        model_dir: str | Path,
        tokenizer: Any,
        *,
        max_model_len: int,
        kv_cache_bytes: int | None = None,
        executor: concurrent.futures.Executor | None = None,
        dtype: str = "auto",
        sleep: bool = True,
        seed: int = 0,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int | None = None,
    ) -> None:
        self._owns_executor = executor is None
        self.executor = executor or concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="vllm-colocate"
        )
        """The one thread every engine call runs on (see the module docstring)."""
        self.tokenizer = tokenizer
        self.model_dir = str(model_dir)
        self.dtype = engine_dtype(dtype)
        """The engine's dtype, ``auto`` resolved."""
        self.sleep_enabled = sleep and on_cuda()
        """Whether ``release`` puts the engine to sleep (``sleep`` asked for, and a CUDA device)."""
        t0 = time.perf_counter()
        self.engine: Any = self.executor.submit(
            build_engine,
            self.model_dir,
            max_model_len,
            kv_cache_bytes,
            self.dtype,
            sleep,
            seed,
            max_num_seqs,
            max_num_batched_tokens,
        ).result()
        """The ``vllm.LLM``."""
        self.start_seconds = time.perf_counter() - t0
        """How long building the engine took."""
        self.lock = threading.Lock()
        """Held while the engine steps and while its weights change."""
        self.weight_version = 0
        """The optimiser step whose weights the engine holds (stamped on every request when it is added)."""
        self.sync_stats: dict[str, float] = {}
        """What the last ``sync_weights`` did: ``sync/bytes`` handed over and ``sync/load_s``, the seconds
        from the first tensor read (gathered, or merged with its adapter) to the last loaded; the trainer logs
        it."""
        self.decode_stats: DecodeStats | None = None
        """None: the engine decodes, so there is no decode loop of ours to count."""
        self.asleep = False
        """Whether the engine is asleep (``release``)."""
        self._ids = itertools.count()
        self._waiting: list[_Request] = []
        self._running: dict[str, _Request] = {}
        self._driver: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ generation

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Sample]:
        """``params.n`` samples for one prompt, decoded in the engine's running batch."""
        if not prompt_ids:
            raise ValueError("prompt_ids is empty")
        if params.seed is None:  # each request its own seed, drawn from torch's generator (which the trainer
            # seeds every step): its samples then do not depend on what else shares the engine's batch
            import torch

            params = replace(params, seed=int(torch.randint(0, 2**31 - 1, (1,)).item()))
        loop = asyncio.get_running_loop()
        request = _Request(f"rg-{next(self._ids)}", list(prompt_ids), params, loop.create_future())
        self._waiting.append(request)
        if self._driver is None or self._driver.done():
            self._driver = loop.create_task(self._drive())
        return await request.future

    async def _drive(self) -> None:
        """Step the engine while any request is waiting or unfinished; new requests join between steps."""
        loop = asyncio.get_running_loop()
        while self._waiting or self._running:
            new, self._waiting = self._waiting, []
            try:
                finished = await loop.run_in_executor(self.executor, self._step, new)
            except Exception as exc:  # the engine failed: every request in it fails, named
                error = BackendError(f"colocated vLLM engine ({self.model_dir}): {type(exc).__name__}: {exc}")
                for request in [*self._running.values(), *new]:
                    if not request.future.done():
                        request.future.set_exception(error)
                self._running.clear()
                await loop.run_in_executor(self.executor, self._abort_all)
                continue
            for request_id, output in finished:
                request = self._running.pop(request_id)
                if not request.future.done():
                    request.future.set_result(self._samples(output, request))

    def _step(self, new: list[_Request]) -> list[tuple[str, Any]]:
        """On the engine's thread: add ``new``, run one engine step, return the finished requests."""
        from vllm import SamplingParams as VllmParams
        from vllm.sampling_params import RequestOutputKind

        with self.lock:
            self._wake()
            engine = self.engine.llm_engine
            for request in new:
                p = request.params
                engine.add_request(
                    request.request_id,
                    {"prompt_token_ids": request.prompt_ids},
                    VllmParams(
                        n=p.n,
                        temperature=p.temperature,
                        top_p=p.top_p,
                        max_tokens=p.max_tokens,
                        min_tokens=p.min_tokens,
                        stop_token_ids=list(p.stop_token_ids) or None,
                        seed=p.seed,
                        logprobs=0,
                        skip_special_tokens=True,
                        output_kind=RequestOutputKind.FINAL_ONLY,
                    ),
                )
                request.version = self.weight_version
                self._running[request.request_id] = request
            outputs = engine.step()
        return [(o.request_id, o) for o in outputs if o.finished]

    def _abort_all(self) -> None:
        with self.lock:
            engine = self.engine.llm_engine
            if engine.has_unfinished_requests():
                ids = list(engine.output_processor.request_states)
                engine.abort_request(ids)

    def _samples(self, output: Any, request: _Request) -> list[Sample]:
        completions = sorted(output.outputs, key=lambda c: c.index)
        if len(completions) != request.params.n:
            raise BackendError(
                f"colocated vLLM engine returned {len(completions)} samples for n={request.params.n}"
            )
        samples = []
        for c in completions:
            ids = [int(t) for t in c.token_ids]
            lps = [_chosen_logprob(step, t) for step, t in zip(c.logprobs or [], ids, strict=False)]
            if len(lps) != len(ids):
                raise BackendError(
                    f"colocated vLLM engine returned {len(lps)} logprobs for {len(ids)} tokens"
                )
            samples.append(
                Sample(
                    completion_ids=ids,
                    logprobs=lps,
                    text=c.text or "",
                    finish_reason=str(c.finish_reason or "length"),
                    meta={"stop_reason": c.stop_reason, "weight_version": request.version},
                )
            )
        return samples

    # ------------------------------------------------------------------ memory

    def release(self) -> None:
        """The trainer is about to train: put the engine to sleep (level 1: weights to host memory, KV cache
        freed) when sleep mode is on; otherwise nothing. The next weight load or request wakes it."""
        if not self.sleep_enabled or self.asleep:
            return
        self.executor.submit(self._sleep).result()

    def _sleep(self) -> None:
        with self.lock:
            if self._running or self._waiting:  # generation ahead of the trainer runs on: no sleep this step
                return
            self.engine.sleep(level=1)
            self.asleep = True
            import torch

            torch.cuda.empty_cache()  # what the engine's forward passes left in torch's cache goes back too

    def _wake(self, tags: tuple[str, ...] = ("weights", "kv_cache")) -> None:
        """Wake what ``tags`` names (called under the lock, on the engine's thread)."""
        if not self.asleep:
            return
        self.engine.wake_up(tags=list(tags))
        if "kv_cache" in tags:
            self.asleep = False

    # ------------------------------------------------------------------ weights

    def weights_changed(self, step: int) -> None:
        """Nothing yet: the engine uses the new weights once ``sync_weights`` loaded them."""

    async def sync_weights(self, weights: WeightSource, step: int) -> None:
        """Load the policy's weights of ``step`` into the engine, in memory: every process into its own
        engine (each gathers what it needs, module by module under ZeRO-3)."""
        loop = asyncio.get_running_loop()
        self.sync_stats = await loop.run_in_executor(self.executor, self._load, weights.module)
        self.weight_version = step

    def _load(self, module: Any) -> dict[str, float]:
        """On the engine's thread: stream the policy's tensors into the worker, one at a time (a LoRA
        policy's merged, as vLLM takes a plain checkpoint); no tensor is collected beforehand."""
        handed = 0

        def tensors() -> Iterator[tuple[str, Any]]:
            nonlocal handed
            source = merged_weights(module) if is_adapted(module) else module_by_module(module)
            for name, tensor in source:
                if not is_tied_head(module, name):
                    handed += tensor.numel() * tensor.element_size()
                    yield name, tensor

        with self.lock:
            self._wake(("weights",))
            (seconds,) = self.engine.collective_rpc(load_into_worker, args=(tensors(),))
            self.engine.reset_prefix_cache()  # cached blocks hold keys and values of the old weights
            self._wake()
        return {"sync/bytes": float(handed), "sync/load_s": float(seconds)}

    async def check_sync(self, weights: WeightSource, tokenizer: Any) -> None:
        """Raise if the engine does not follow the policy. In the policy's own dtype: its greedy tokens must
        equal the policy's. In another (a bf16 engine beside a float32 policy), rounding alone can turn a
        greedy choice between two close tokens, so each greedy token of the engine must be within
        ``DTYPE_GAP`` nats of the policy's best at that position, and its logprob within ``DTYPE_GAP`` of the
        policy's. Every process checks its own engine."""
        import torch

        policy = weights.module
        if self.dtype == str(next(policy.parameters()).dtype).removeprefix("torch."):
            await compare_greedy(self, weights, tokenizer)
            return
        prompt = sync_check_prompt(tokenizer)
        (served,) = await self.generate(prompt, SamplingParams(n=1, temperature=0.0, max_tokens=8))
        ids = torch.tensor([prompt + served.completion_ids], device=next(policy.parameters()).device)
        with torch.no_grad():
            logits = policy(ids).logits[0, len(prompt) - 1 : -1].float()
        logprobs = torch.log_softmax(logits, -1)
        chosen = logprobs.gather(-1, ids[0, len(prompt) :, None])[:, 0]
        gaps = (logprobs.max(-1).values - chosen).tolist()
        apart = (chosen - torch.tensor(served.logprobs, device=chosen.device)).abs().tolist()
        if max(gaps) > DTYPE_GAP or max(apart) > DTYPE_GAP:
            raise RuntimeError(
                f"weight sync check failed: the {self.dtype} engine's greedy tokens {served.completion_ids} "
                f"are up to {max(gaps):.3f} nats below the policy's best, their logprobs up to "
                f"{max(apart):.3f} apart (at most {DTYPE_GAP} in another dtype)"
            )

    async def close(self) -> None:
        """Abort what runs, shut the engine down, end its thread when it owns it."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.executor, self._shutdown)
        if self._owns_executor:
            self.executor.shutdown(wait=True)

    def _shutdown(self) -> None:
        self._abort_all()
        shutdown = getattr(self.engine.llm_engine, "engine_core", None)
        if shutdown is not None and hasattr(shutdown, "shutdown"):
            shutdown.shutdown()


def _chosen_logprob(step: Mapping[int, Any] | None, token: int) -> float:
    """The sampled token's logprob in one step of vLLM's ``logprobs`` (NaN when it is missing)."""
    if not step or token not in step:
        return math.nan
    return float(step[token].logprob)
