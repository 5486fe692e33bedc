"""Push a LoRA adapter, not the whole model, into running vLLM servers (the trainer's side of a LoRA run).

The servers serve the frozen base model with ``--enable-lora`` and load adapters at run time
(``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1``; :func:`lora_server_args` and :data:`LORA_SERVER_ENV`). After each
optimiser step :meth:`AdapterSync.push`:

1. writes the adapter in peft's format (``adapter_config.json``, ``adapter_model.safetensors``) to a fresh
   folder in ``/dev/shm`` (a temporary folder where there is none), which the servers must be able to read;
2. ``POST /v1/load_lora_adapter`` ``{"lora_name": "<prefix>-step-N", "lora_path": folder}`` on every server,
   concurrently: vLLM reads and checks the folder then (rank, modules), so a bad adapter fails here;
3. makes that name the one requests give as their ``model`` (:attr:`AdapterSync.current`);
4. ``POST /v1/unload_lora_adapter`` of the previous name on every server (it leaves ``GET /v1/models``), and
   deletes the previous folder once no request of this client that names it is in flight.

The other processes of a run push nothing; after the barrier they name the adapter the main process loaded
(:meth:`AdapterSync.follow`), which is why a run's processes share the names' prefix.

Nothing pauses: a request in flight keeps the adapter it named (vLLM holds it in memory, up to
``--max-loras`` of them), and a folder is kept while a request of the main process naming it is in flight
(the other processes' requests rely on vLLM's copy in memory). A failure raises
:class:`~envs.serving.weights.WeightSyncError` naming the server, the step and the cause, with the previous
adapter still current. vLLM 0.32 serves LoRA on its CPU build too (eager, without compilation).
"""

from __future__ import annotations

import asyncio
import collections
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from envs.serving.server import normalize_base_url
from envs.serving.weights import WeightSyncError, default_tmp_dir

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The values vLLM 0.32 accepts for ``--max-lora-rank``."""
LORA_SERVER_ENV = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}
"""What a server needs in its environment to have ``/v1/load_lora_adapter`` and
``/v1/unload_lora_adapter``."""
MAX_LORAS = 2
"""Adapters a server holds at once: the current one and the previous one, whose requests may be in flight."""
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def max_lora_rank(r: int) -> int:
    """The smallest ``--max-lora-rank`` vLLM accepts that serves adapters of rank ``r``."""
    for rank in LORA_RANKS:
        if rank >= r:
            return rank
    raise ValueError(f"LoRA rank {r} is above the largest vLLM serves ({LORA_RANKS[-1]})")


def lora_server_args(r: int) -> list[str]:
    """``vllm serve`` flags that serve run-time adapters of rank up to ``r``."""
    return ["--enable-lora", "--max-lora-rank", str(max_lora_rank(r)), "--max-loras", str(MAX_LORAS)]


def check_lora_server(url: str, r: int, timeout_s: float = 60.0) -> None:
    """Raise ``ValueError`` (naming ``url`` and the flag to set) unless the server at ``url`` loads adapters
    of rank ``r`` at run time. Reads the dev-mode route ``GET /server_info`` (``VLLM_SERVER_DEV_MODE=1``,
    which weight sync needs anyway)."""
    url = normalize_base_url(url)
    flags = " ".join(lora_server_args(r))
    try:
        resp = httpx.get(f"{url}/server_info", params={"config_format": "json"}, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise ValueError(f"vLLM server {url} is unreachable ({type(exc).__name__}: {exc})") from exc
    if resp.status_code == 404:
        raise ValueError(
            f"vLLM server {url} has no /server_info: start it with VLLM_SERVER_DEV_MODE=1 "
            "(rubric-grpo serve does)"
        )
    if resp.status_code != 200:
        raise ValueError(
            f"vLLM server {url}: /server_info answered HTTP {resp.status_code}: {resp.text[:300]}"
        )
    info = resp.json()
    lora = (info.get("vllm_config") or {}).get("lora_config")
    if not lora:
        raise ValueError(f"vLLM server {url} serves no LoRA adapters: restart it with {flags}")
    if not (info.get("vllm_env") or {}).get("VLLM_ALLOW_RUNTIME_LORA_UPDATING"):
        raise ValueError(
            f"vLLM server {url} cannot load adapters at run time: restart it with "
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1"
        )
    served = int(lora.get("max_lora_rank") or 0)
    if served < r:
        raise ValueError(
            f"rank {r} is above the --max-lora-rank {served} of vLLM server {url}: restart it with {flags}"
        )


def write_adapter(module: Any, state_dict: Mapping[str, Any], folder: Path) -> int:
    """Write the active adapter of the peft model ``module`` to ``folder`` in peft's format, its weights taken
    from ``state_dict`` (``module``'s full state dict, gathered when sharded); returns the bytes written."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    (name,) = module.active_adapters
    adapter = get_peft_model_state_dict(module, state_dict=dict(state_dict), adapter_name=name)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.detach().to("cpu").contiguous() for k, v in adapter.items()}, str(folder / ADAPTER_FILES[1])
    )
    module.peft_config[name].save_pretrained(str(folder))
    return sum((folder / f).stat().st_size for f in ADAPTER_FILES)


async def _post(client: httpx.AsyncClient, url: str, route: str, body: dict[str, Any], what: str) -> None:
    try:
        resp = await client.post(f"{url}{route}", json=body)
    except httpx.HTTPError as exc:
        raise WeightSyncError(f"{url}: {what} ({route}) failed: {type(exc).__name__}: {exc}") from exc
    if resp.status_code == 404 and resp.text.startswith('{"detail"'):  # no such route (not: no such adapter)
        raise WeightSyncError(
            f"{url}: {what}: {route} not found: start the server with --enable-lora and "
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 (rubric-grpo serve --lora-rank R)"
        )
    if resp.status_code != 200:
        raise WeightSyncError(f"{url}: {what} ({route}) answered HTTP {resp.status_code}: {resp.text[:1000]}")


class AdapterSync:
    """The adapters one trainer has loaded into its servers, and the folders they were read from.

    Args:
        base_urls: Root URLs of the servers.
        timeout_s: Limit of every load and unload call.
        tmp_dir: Where the adapter folders go; ``/dev/shm`` when it exists, else the system's temporary
            folder.
        prefix: Names of the run's adapters start with it (``<prefix>-step-N``): the same in every process of
            a run, so that the processes that do not push name what the main one loaded (:meth:`follow`);
            a random one by default.
    """

    def __init__(
        self,
        base_urls: Sequence[str],
        timeout_s: float = 300.0,
        tmp_dir: str | None = None,
        prefix: str | None = None,
    ) -> None:
        self.base_urls = [normalize_base_url(u) for u in base_urls]
        self.timeout_s = timeout_s
        self.tmp_dir = tmp_dir or default_tmp_dir()
        self.prefix = prefix or f"policy-{uuid.uuid4().hex[:8]}"
        """Names of this run's adapters start with it, so that two runs on one server never collide."""
        self.current: str | None = None
        """The adapter requests name (their ``model``); None before the first push: the base model."""
        self.in_flight: collections.Counter[str] = collections.Counter()
        """Requests in flight per adapter name (the caller counts them)."""
        self._folders: dict[str, Path] = {}

    async def push(self, module: Any, state_dict: Mapping[str, Any], step: int) -> dict[str, float]:
        """Load ``module``'s adapter (weights from ``state_dict``) into every server as
        ``<prefix>-step-<step>``, make it current, unload the previous one; returns the metrics of the sync
        (``sync/...``)."""
        name = self.name(step)
        folder = Path(tempfile.mkdtemp(prefix=f"rubric-grpo-{name}-", dir=self.tmp_dir))
        if name in self._folders:  # the same step pushed again: it replaces its own adapter below
            shutil.rmtree(self._folders[name], ignore_errors=True)
        self._folders[name] = folder
        t0 = time.perf_counter()
        written = await asyncio.to_thread(write_adapter, module, state_dict, folder)
        t_load = time.perf_counter()
        body = {"lora_name": name, "lora_path": str(folder)}
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                try:
                    await self._everywhere(
                        client, "/v1/load_lora_adapter", body, f"step {step}: load adapter"
                    )
                except WeightSyncError as exc:  # left by a run in this folder that stopped without closing
                    if "has already been loaded" not in str(exc):
                        raise
                    await self._unload(client, name)
                    await self._everywhere(
                        client, "/v1/load_lora_adapter", body, f"step {step}: load adapter"
                    )
                previous, self.current = self.current, name
                t_unload = time.perf_counter()
                if previous is not None and previous != name:
                    body = {"lora_name": previous}
                    await self._everywhere(
                        client, "/v1/unload_lora_adapter", body, f"step {step}: unload adapter"
                    )
        finally:
            self._delete_unused()
        return {
            "sync/bytes": float(written),
            "sync/save_s": t_load - t0,
            "sync/load_s": t_unload - t_load,
        }

    async def _everywhere(
        self, client: httpx.AsyncClient, route: str, body: dict[str, Any], what: str
    ) -> None:
        outcomes = await asyncio.gather(
            *(_post(client, url, route, body, what) for url in self.base_urls), return_exceptions=True
        )
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise WeightSyncError("; ".join(str(e) for e in errors)) from errors[0]

    def name(self, step: int) -> str:
        """The name of the adapter of ``step``."""
        return f"{self.prefix}-step-{step}"

    def follow(self, step: int) -> None:
        """Name the adapter of ``step`` from now on, loaded by another process of the run (the main one)."""
        self.current = self.name(step)

    async def _unload(self, client: httpx.AsyncClient, name: str) -> None:
        """Unload ``name`` from every server that has it (no error where it is not loaded)."""
        body = {"lora_name": name}
        await asyncio.gather(
            *(_post(client, u, "/v1/unload_lora_adapter", body, "unload") for u in self.base_urls),
            return_exceptions=True,
        )

    def _delete_unused(self) -> None:
        """Delete the folder of every adapter that is not current and has no request of ours in flight."""
        for name in [n for n in self._folders if n != self.current and not self.in_flight[n]]:
            shutil.rmtree(self._folders.pop(name), ignore_errors=True)

    def folder(self, name: str) -> Path | None:
        """The folder adapter ``name`` was loaded from, while it is kept."""
        return self._folders.get(name)

    async def close(self) -> None:
        """Unload the current adapter from the servers if this process loaded it (best effort) and delete
        every folder."""
        if self.current is not None and self.current in self._folders:
            async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                await self._unload(client, self.current)
        self.current = None
        self.in_flight.clear()
        self._delete_unused()
