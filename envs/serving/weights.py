"""Push new policy weights into running vLLM servers without restarting them (the trainer's side).

CPU path (what runs here; ``docs/architecture.md``): the state dict is written as one safetensors file in a
temporary folder (in ``/dev/shm`` when it exists, so the "file" is shared memory), then for every server,
concurrently:

1. ``POST /pause?mode=wait``: no new requests start; in-flight ones finish (``mode=keep`` freezes them and
   ``abort`` drops them instead);
2. ``POST /collective_rpc`` ``{"method": "rg_reload_weights", "args": [path]}``: the worker extension
   :class:`envs.serving.worker.WeightSyncExtension` reloads the file in place and re-ties a tied output head;
3. ``POST /reset_prefix_cache``: cached KV blocks were computed with the old weights;
4. ``POST /update_weight_version`` (when a version is given; ``GET /weight_info`` reports it);
5. ``POST /resume``, always, even when a step failed.

Every call has ``timeout_s``; a failure raises :class:`WeightSyncError` naming the server, the step and
the cause. The servers must run with ``VLLM_SERVER_DEV_MODE=1`` and
``--worker-extension-cls envs.serving.worker.WeightSyncExtension``
(:func:`envs.serving.launch.rl_server_args`), and must see the file: same host, or a ``tmp_dir`` on a shared
filesystem.

Servers on other machines need ``tmp_dir`` on a filesystem they mount (``rollout.weights_dir``); on CUDA hosts
full weights can travel over vLLM's own NCCL transfer engine instead, without a file
(:mod:`envs.serving.transfer`, ``rollout.transfer.path: nccl``).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from envs.serving.server import normalize_base_url
from envs.serving.worker import RELOAD_METHOD

PauseMode = Literal["wait", "keep", "abort"]
WEIGHTS_FILE = "model.safetensors"


class WeightSyncError(RuntimeError):
    """A weight push failed; the message names the server, the step and the cause."""


@dataclass
class WeightPushResult:
    """What one :func:`push_weights` did and how long it took."""

    path: str
    """The safetensors file or folder the servers loaded (deleted afterwards when it was temporary)."""
    save_seconds: float
    """Writing the state dict (0 when a path was given)."""
    bytes: int
    """Size of what the servers read: the file, or every safetensors file of the folder."""
    total_seconds: float
    """From the call to the last server resumed."""
    reload_seconds: dict[str, float] = field(default_factory=dict)
    """Per server: the worker's own reload time."""
    server_seconds: dict[str, float] = field(default_factory=dict)
    """Per server: pause, reload, cache reset and resume, as seen by the client."""


def default_tmp_dir() -> str | None:
    """``/dev/shm`` when it exists and is writable (files there are shared memory), else None (the
    system's)."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def save_state_dict(state_dict: Mapping[str, Any], path: str | Path) -> Path:
    """Write a torch state dict as one safetensors file (CPU, contiguous; tied tensors stored once).

    A tensor that shares its storage with one already written (a tied ``lm_head.weight``) is skipped:
    checkpoints of tied models carry only the embedding, and vLLM re-ties the head from it.
    """
    from safetensors.torch import save_file

    tensors: dict[str, Any] = {}
    seen: dict[tuple[int, int, tuple[int, ...]], str] = {}
    # Visit lm_head last so that, for a tied pair, the embedding is the copy that is kept.
    names = sorted(state_dict, key=lambda n: n.startswith("lm_head"))
    for name in names:
        tensor = state_dict[name]
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if tensor.device.type != "meta" and key in seen:
            continue
        seen[key] = name
        tensors[name] = tensor.detach().to("cpu").contiguous()
    out = Path(path)
    save_file(tensors, str(out))
    return out


def _existing_path(weights: str | Path) -> str:
    path = Path(weights).resolve()
    if not path.exists():
        raise FileNotFoundError(f"no weights at {path}")
    return str(path)


def _size(path: str) -> int:
    """Bytes of a safetensors file, or of the safetensors files of a folder."""
    p = Path(path)
    return p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.glob("*.safetensors"))


async def post_route(
    client: httpx.AsyncClient,
    url: str,
    step: str,
    route: str,
    timeout_s: float,
    json: Any = None,
    params: dict[str, str] | None = None,
) -> Any:
    """One control call with a hard timeout; raises WeightSyncError naming the server and step."""
    try:
        async with asyncio.timeout(timeout_s):
            resp = await client.post(f"{url}{route}", json=json, params=params, timeout=timeout_s)
    except TimeoutError as exc:
        raise WeightSyncError(f"{url}: {step} ({route}) got no answer within {timeout_s:g} s") from exc
    except httpx.HTTPError as exc:
        raise WeightSyncError(f"{url}: {step} ({route}) failed: {type(exc).__name__}: {exc}") from exc
    if resp.status_code == 404:
        raise WeightSyncError(
            f"{url}: {step} ({route}) not found: start the server with VLLM_SERVER_DEV_MODE=1 "
            "(envs.serving.launch.rl_server_env)"
        )
    if resp.status_code != 200:
        raise WeightSyncError(f"{url}: {step} ({route}) answered HTTP {resp.status_code}: {resp.text[:1000]}")
    return resp.json() if resp.content else None


async def reset_prefix_cache(
    client: httpx.AsyncClient, url: str, timeout_s: float, step: str = "reset prefix cache"
) -> None:
    """``POST /reset_prefix_cache`` until it succeeds: cached KV blocks were computed with the old weights.
    It fails while blocks are still held; they are released right after a pause."""
    for _ in range(20):
        reset = await post_route(client, url, step, "/reset_prefix_cache", timeout_s)
        if not isinstance(reset, dict) or reset.get("success", True):
            return
        await asyncio.sleep(0.05)
    raise WeightSyncError(f"{url}: {step} kept failing (blocks still held)")


async def _push_one(
    client: httpx.AsyncClient,
    url: str,
    path: str,
    timeout_s: float,
    pause_mode: PauseMode,
    weight_version: str | None,
) -> tuple[float, float]:
    """Pause, reload, reset the prefix cache, stamp the version, resume. Returns (reload s, total s)."""
    t0 = time.perf_counter()
    await post_route(client, url, "pause", "/pause", timeout_s, params={"mode": pause_mode})
    try:
        rpc = {"method": RELOAD_METHOD, "args": [path], "timeout": timeout_s}
        data = await post_route(client, url, "reload weights", "/collective_rpc", timeout_s, json=rpc)
        results = (data or {}).get("results") or []
        if not results or not all(isinstance(r, dict) for r in results):
            hint = (
                "; is the server started with --worker-extension-cls envs.serving.worker.WeightSyncExtension?"
                if any(isinstance(r, str) for r in results)
                else ""
            )
            raise WeightSyncError(f"{url}: reload weights returned {data!r}{hint}")
        reload_s = max(float(r.get("seconds", 0.0)) for r in results)
        await reset_prefix_cache(client, url, timeout_s)
        if weight_version is not None:
            await post_route(
                client, url, "set weight version", "/update_weight_version", timeout_s,
                json={"new_version": weight_version},
            )  # fmt: skip
    finally:
        await post_route(client, url, "resume", "/resume", timeout_s)
    return reload_s, time.perf_counter() - t0


async def push_weights(
    base_urls: Sequence[str] | str,
    weights: Mapping[str, Any] | str | Path,
    timeout_s: float = 300.0,
    *,
    pause_mode: PauseMode = "wait",
    weight_version: str | None = None,
    tmp_dir: str | Path | None = None,
) -> WeightPushResult:
    """Load new weights into every server in ``base_urls`` (concurrently) without restarting them.

    Args:
        base_urls: Root URLs of the servers.
        weights: A torch state dict with the Hugging Face names (gathered: not a ZeRO-3 shard), or the
            path of a safetensors file or of a folder of them, readable by the servers.
        timeout_s: Limit of every control call (pause, reload, cache reset, resume).
        pause_mode: How ``/pause`` treats requests in flight: ``wait`` (finish them first), ``keep``
            (freeze and continue them with the new weights) or ``abort``.
        weight_version: Stamped on the servers (``GET /weight_info``) after a successful reload.
        tmp_dir: Where to write the state dict; ``/dev/shm`` by default when it exists.

    Raises:
        WeightSyncError: naming the server, the step and the cause (every server is resumed first).
    """
    urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
    if not urls:
        raise ValueError("push_weights needs at least one base URL")
    urls = list(dict.fromkeys(normalize_base_url(u) for u in urls))
    t0 = time.perf_counter()
    tmp: tempfile.TemporaryDirectory[str] | None = None
    save_s = 0.0
    size = 0
    try:
        if isinstance(weights, str | Path):
            path = _existing_path(weights)
        else:
            tmp = tempfile.TemporaryDirectory(prefix="rubric-grpo-weights-", dir=tmp_dir or default_tmp_dir())
            t_save = time.perf_counter()
            path = str(await asyncio.to_thread(save_state_dict, weights, Path(tmp.name) / WEIGHTS_FILE))
            save_s = time.perf_counter() - t_save
        size = _size(path)
        timings = await _push_all(urls, path, timeout_s, pause_mode, weight_version)
    finally:
        if tmp is not None:
            tmp.cleanup()
    result = WeightPushResult(
        path=path, save_seconds=save_s, bytes=size, total_seconds=time.perf_counter() - t0
    )
    for url, timing in zip(urls, timings, strict=True):
        result.reload_seconds[url], result.server_seconds[url] = timing
    return result


async def _push_all(
    urls: Sequence[str], path: str, timeout_s: float, pause_mode: PauseMode, weight_version: str | None
) -> list[tuple[float, float]]:
    """``_push_one`` on every server at once; (reload s, total s) per server, in the order of ``urls``.

    Every server is resumed before an error is raised: a server's own error as it is, several joined."""
    async with httpx.AsyncClient(timeout=timeout_s) as client:
        outcomes = await asyncio.gather(
            *(_push_one(client, u, path, timeout_s, pause_mode, weight_version) for u in urls),
            return_exceptions=True,
        )
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    if errors:
        if len(errors) == 1:
            raise errors[0]
        raise WeightSyncError("; ".join(str(e) for e in errors)) from errors[0]
    return [o for o in outcomes if not isinstance(o, BaseException)]
