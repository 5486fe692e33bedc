"""The local backend: sampling from a transformers model in this process (the embedded default).

Concurrent ``generate`` calls are gathered into one batched decode (rows left-padded,
``envs.backends.decode``), so many rollouts in flight share each forward pass. Generation runs on one
dedicated worker thread (``LocalBackend.executor``), leaving the event loop free for judges. The model object
is the trainer's own module, so weight sync costs nothing.

Why one thread: PyTorch's CPU kernels run on an OpenMP team owned by the calling thread. Once two threads
have each run parallel work, libgomp counts more worker threads than cores and stops spinning between
parallel regions, so every small kernel pays a wake-up and generation slows down (docs/results.md, "One
torch thread"). A trainer that shares the model should run its own torch work on ``executor`` too
(``train.trainer`` does).

Logprobs are the log-softmax of the **raw** logits divided by the temperature, over the whole vocabulary,
recorded step by step: the same quantity the trainer computes; no ``vocab x steps`` logits tensor is ever
kept. None of the model file's ``generation_config`` defaults (top-k, repetition penalty) apply.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any

from envs.backends.base import Sample, SamplingParams, WeightSource
from envs.backends.decode import DecodeStats, Decoding, decode, packed_linears
from envs.models.adapters import is_adapted, merged_weights, plain_copy
from envs.models.kv_cache import cache_name


@dataclass
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    future: asyncio.Future[list[Sample]] = field(repr=False)


class LocalBackend:
    """Batched sampling with a transformers causal LM held in this process."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_batch_rows: int = 64,
        executor: concurrent.futures.Executor | None = None,
        sampling_dtype: str | None = None,
        pack_weights: bool = True,
    ) -> None:
        self._owns_executor = executor is None
        self.executor = executor or concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="local-backend"
        )
        """The single thread that runs ``generate`` (see the module docstring); shareable with a trainer."""
        self.policy = model
        """The policy being trained (the trainer's module)."""
        self.model = self.executor.submit(_sampling_copy, model, sampling_dtype).result()
        """What generates: the policy itself (shared with the trainer: weight sync is free), or a copy of it
        in ``sampling_dtype`` that ``sync_weights`` refreshes after each optimiser step; made on the
        backend's thread, like every later torch operation of the backend (one OpenMP team)."""
        self.tokenizer = tokenizer
        """Its tokenizer (for decoding text and the end-of-sequence ids)."""
        self.max_batch_rows = max_batch_rows
        """Most sequences generated together in one ``generate`` call."""
        self.pack_weights = pack_weights
        """Decode on the CPU with the linear weights reordered for oneDNN, once per batch (float32, and bf16
        where the CPU computes it natively; ``envs.backends.decode.packed_linears``: a transient copy of the
        weights while it decodes)."""
        self.share_prefill = True
        """Prefill each distinct prompt of a batch once and share its KV cache (see ``_shared_prefill``)."""
        self.lock = threading.Lock()
        """Held while generating; the trainer holds it while it updates the weights."""
        self.decode_stats = DecodeStats()
        """What the decode loops did so far (forwards, rows per forward); the trainer logs it per step."""
        self.sync_stats: dict[str, float] = {}
        """Nothing is sent: generation reads the policy itself."""
        self._queue: list[_Request] = []
        self._worker: asyncio.Task[None] | None = None
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_token_id: int = int(pad)
        self.eos_token_ids: tuple[int, ...] = _eos_ids(model, tokenizer)
        self.weight_version = 0
        """The optimiser step whose weights generate now (stamped on every sample, read under the lock)."""

    @classmethod
    def from_pretrained(
        cls, path: str, dtype: str = "float32", device: str = "cpu", **kwargs: Any
    ) -> LocalBackend:
        """Load a model folder (no hub access: pass a local path)."""
        import torch
        from transformers import AutoTokenizer

        from envs.models.loading import check_versions, load_causal_lm

        check_versions()
        tokenizer = AutoTokenizer.from_pretrained(path)
        model: Any = load_causal_lm(path, dtype=getattr(torch, dtype), attn_implementation="sdpa")
        return cls(model.to(device).eval(), tokenizer, **kwargs)

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Sample]:
        """``params.n`` samples for one prompt; batched with the other calls in flight."""
        if not prompt_ids:
            raise ValueError("prompt_ids is empty")
        loop = asyncio.get_running_loop()
        request = _Request(list(prompt_ids), params, loop.create_future())
        self._queue.append(request)
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._drain())
        return await request.future

    async def _drain(self) -> None:
        await self._gather_requests()
        while self._queue:
            batch = self._take_batch()
            try:
                results = await asyncio.get_running_loop().run_in_executor(
                    self.executor, self._generate_batch, batch
                )
            except Exception as exc:
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(exc)
                continue
            for request, samples in zip(batch, results, strict=True):
                if not request.future.done():
                    request.future.set_result(samples)
            await self._gather_requests()

    async def _gather_requests(self, quiet_ticks: int = 3, most_ticks: int = 200) -> None:
        """Let the event loop run until no new request has come for ``quiet_ticks`` turns of it (at most
        ``most_ticks``), so that every rollout whose reply was just delivered, and is judged and re-prompted
        without waiting on I/O (rule judges, the chat template), joins the next batch instead of a batch of
        its own a moment later. Counted in loop turns, not seconds: the batches, and so the sampled tokens,
        do not depend on the machine's speed."""
        quiet, seen = 0, -1
        for _ in range(most_ticks):
            rows = sum(r.params.n for r in self._queue)
            if rows >= self.max_batch_rows:
                return
            quiet = quiet + 1 if rows == seen else 0
            if quiet >= quiet_ticks:
                return
            seen = rows
            await asyncio.sleep(0)

    def _take_batch(self) -> list[_Request]:
        """The oldest request plus every queued one with the same settings, up to ``max_batch_rows``."""
        key = _batch_key(self._queue[0].params)
        batch: list[_Request] = []
        rest: list[_Request] = []
        rows = 0
        for request in self._queue:
            if _batch_key(request.params) == key and (
                not batch or rows + request.params.n <= self.max_batch_rows
            ):
                batch.append(request)
                rows += request.params.n
            else:
                rest.append(request)
        self._queue = rest
        return batch

    def _generate_batch(self, batch: list[_Request]) -> list[list[Sample]]:
        import torch

        params = batch[0].params
        rows = [r.prompt_ids for r in batch for _ in range(r.params.n)]
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, ids in enumerate(rows):  # left padding
            input_ids[i, width - len(ids) :] = torch.tensor(ids)
            attention_mask[i, width - len(ids) :] = 1
        device = next(self.model.parameters()).device
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        stop_ids = list(dict.fromkeys([*self.eos_token_ids, *params.stop_token_ids]))
        row_max = [r.params.max_tokens for r in batch for _ in range(r.params.n)]
        how = Decoding(
            max_new_tokens=max(row_max),
            min_new_tokens=params.min_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            stop_ids=stop_ids,
            pad_id=self.pad_token_id,
            row_max_tokens=row_max,
            row_min_tokens=[r.params.min_tokens for r in batch for _ in range(r.params.n)],
            sync_every=1 if device.type == "cpu" else 8,
        )
        pack = packed_linears(self.model) if self.pack_weights else contextlib.nullcontext()
        with self.lock, torch.inference_mode(), pack:
            cache = self._shared_prefill(rows, input_ids, attention_mask) if self.share_prefill else None
            if params.seed is not None:
                torch.manual_seed(params.seed)
            if cache is not None:
                self.decode_stats.prefills += 1
            generated, logprobs = decode(self.model, input_ids, attention_mask, cache, how, self.decode_stats)
            version = self.weight_version  # the weights cannot change while the lock is held
        generated, logprobs = generated.cpu(), logprobs.cpu()  # [rows, steps]
        samples = [  # a row's tokens past its own max_tokens are padding
            self._sample(
                generated[i, : row_max[i]].tolist(), logprobs[i, : row_max[i]].tolist(), stop_ids, version
            )
            for i in range(len(rows))
        ]
        results, start = [], 0
        for request in batch:
            results.append(samples[start : start + request.params.n])
            start += request.params.n
        return results

    def _shared_prefill(self, rows: list[list[int]], input_ids: Any, attention_mask: Any) -> Any:
        """The KV cache of every row's prompt but its last token, each distinct prompt computed once.

        The G rollouts of a group start from one prompt; on a CPU the prefill of long multi-turn prompts
        costs more than the decoding, so it runs once per distinct prompt and the cache is copied to the
        rows that share it. None when no prompt repeats (``generate`` then prefills as usual)."""
        import torch

        first_row: dict[tuple[int, ...], int] = {}
        source = [first_row.setdefault(tuple(ids), i) for i, ids in enumerate(rows)]
        if len(first_row) == len(rows) or input_ids.shape[1] < 2:
            return None
        distinct = sorted(first_row.values())
        ids_UW, mask_UW = input_ids[distinct, :-1], attention_mask[distinct, :-1]
        position_ids = (mask_UW.cumsum(-1) - 1).masked_fill(mask_UW == 0, 0)  # as generate() numbers them
        out = self.model(  # logits of one position only: a [U, W, V] block for a cache was gigabytes
            input_ids=ids_UW,
            attention_mask=mask_UW,
            position_ids=position_ids,
            use_cache=True,
            logits_to_keep=1,
        )
        cache = getattr(out, cache_name())  # ``out.cache`` in newer transformers (envs.models.kv_cache)
        slot = {row: u for u, row in enumerate(distinct)}
        cache.reorder_cache(torch.tensor([slot[r] for r in source], device=input_ids.device))
        return cache

    def _sample(self, ids: list[int], logprobs: list[float], stop_ids: list[int], version: int) -> Sample:
        end = next((i for i, t in enumerate(ids) if t in stop_ids), None)
        if end is not None:
            ids, logprobs, reason = ids[: end + 1], logprobs[: end + 1], "stop"
        else:
            reason = "length"
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        meta = {"weight_version": version}
        return Sample(completion_ids=ids, logprobs=logprobs, text=text, finish_reason=reason, meta=meta)

    def weights_changed(self, step: int) -> None:
        """The trainer stepped the policy: generating from the policy itself now uses version ``step``
        (called on this backend's thread, so no generation runs in between); a copy waits for its sync."""
        if self.model is self.policy:
            self.weight_version = step

    def release(self) -> None:
        """Nothing to give back: the KV cache of a batch lives only while the batch decodes."""

    async def sync_weights(self, weights: WeightSource, step: int) -> None:
        """Refresh the sampling copy from the policy, on the worker thread and under the lock (so queued
        generation never sees half-copied weights); nothing to do when generating from the policy itself."""
        if self.model is self.policy:
            self.weight_version = step  # already so after an update; after a resume, the label catches up
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.executor, self._copy_weights, weights.module, step)

    def _copy_weights(self, policy: Any, step: int) -> None:
        import torch

        with self.lock, torch.no_grad():
            if is_adapted(policy):  # LoRA: each adapted weight merged, W + B @ A * alpha / r, then copied
                _copy_merged(self.model, policy)
            else:  # same architecture: the parameters pair up in order
                for target, source in zip(self.model.parameters(), policy.parameters(), strict=True):
                    target.copy_(source)
            self.weight_version = step

    async def check_sync(self, weights: WeightSource, tokenizer: Any) -> None:
        """Nothing to check: generation reads the policy, or a copy refreshed from it in this process."""
        return None

    async def close(self) -> None:
        """Finish the work in flight and stop the worker thread (the model belongs to the caller)."""
        if self._worker is not None:
            await asyncio.gather(self._worker, return_exceptions=True)
        if self._owns_executor:
            self.executor.shutdown(wait=True)


def _sampling_copy(policy: Any, dtype: str | None) -> Any:
    """``policy`` itself, or a frozen copy of it in ``dtype`` when that differs from the policy's dtype. A
    LoRA-adapted policy is always copied: a plain model of its architecture holding the merged weights,
    which samples faster than peft's forward (``envs.models.adapters``)."""
    import copy

    import torch

    adapted = is_adapted(policy)
    if not adapted and (dtype is None or getattr(torch, dtype) == next(policy.parameters()).dtype):
        return policy
    sampler = plain_copy(policy) if adapted else copy.deepcopy(policy)
    sampler = sampler.to(getattr(torch, dtype)) if dtype is not None else sampler
    for wrapper in ("forward", "_original_forward"):  # accelerate's autocast wrapper: the copy runs plain
        sampler.__dict__.pop(wrapper, None)
    return sampler.eval().requires_grad_(False)


def _copy_merged(sampler: Any, policy: Any) -> None:
    """Copy the adapted ``policy``'s merged weights into the plain ``sampler``, one weight at a time."""
    targets = dict(sampler.named_parameters(remove_duplicate=False))
    missing = set(targets)
    for name, tensor in merged_weights(policy):
        if name not in targets:
            raise KeyError(f"the sampling copy has no parameter {name}")
        targets[name].copy_(tensor)
        missing.discard(name)
    if missing:
        raise KeyError(f"the adapted policy gave no weights for {sorted(missing)[:5]}")


def _batch_key(params: SamplingParams) -> tuple[Any, ...]:
    """Requests that may share a batch (``max_tokens`` and ``min_tokens`` are per row)."""
    return (params.temperature, params.top_p, params.stop_token_ids, params.seed)


def _eos_ids(model: Any, tokenizer: Any) -> tuple[int, ...]:
    ids: list[int] = []
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (config_eos, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.append(value)
        elif isinstance(value, list | tuple):
            ids.extend(int(v) for v in value)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else None
    if isinstance(im_end, int):
        ids.append(im_end)
    return tuple(dict.fromkeys(ids))
