"""Full weights to remote vLLM servers over vLLM's own weight-transfer engine (NCCL): the trainer's side.

The servers run ``rubric-grpo serve MODEL --weight-transfer nccl`` (``vllm serve --weight-transfer-config
'{"backend": "nccl"}'``, with the control routes of ``VLLM_SERVER_DEV_MODE=1``). At the first sync the
trainer's main process checks every server (its vLLM release and routes, ``GET /get_world_size``) and forms
one NCCL group with all of them (:func:`plan_group`): the trainer is rank 0, and each server's workers follow
at their own rank offset. ``POST /init_weight_transfer_engine`` goes to every server while the trainer opens
its end of the group. Then, per optimiser step (:meth:`NcclWeightTransfer.push`), on every server at once:

1. ``/pause?mode=wait`` and ``/start_weight_update``;
2. ``/update_weights`` with every tensor's name, dtype and shape, while the trainer broadcasts the tensors,
   packed into buffers of ``buffer_bytes`` (:func:`send_packed`, vLLM's packing, so the servers unpack what
   the trainer packed);
3. ``/finish_weight_update``, ``/update_weight_version`` (``step-N``) and ``/reset_prefix_cache``;
4. ``/resume``, on every server, also when a step failed.

A server that fails or does not answer within ``timeout_s`` gets a :class:`WeightSyncError` naming it, the
call and the training step. A failed update leaves the group unusable (a server may still wait inside its
receive), so later pushes refuse at once. The path needs CUDA and NCCL on the trainer's main process and
vLLM's CUDA build in its environment: :func:`check_nccl_host` refuses anything else at start, as vLLM's NCCL
engine is known to report success while moving nothing on a host without NCCL. Without them, full weights
reach servers on other machines as files in a folder they all mount (``rollout.weights_dir``,
:func:`envs.serving.weights.push_weights`). ``docs/training.md`` (Several machines) says what runs where.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from envs.serving.server import normalize_base_url
from envs.serving.weights import WeightSyncError, post_route, reset_prefix_cache

WRITTEN_FOR = (0, 32)
"""The vLLM release whose transfer API this module speaks (packed wire settings given at init; the API
changed at 0.16, 0.19 and 0.28). Older servers are refused; newer ones are used with a warning."""
TRANSFER_ROUTES = (
    "/get_world_size",
    "/init_weight_transfer_engine",
    "/start_weight_update",
    "/update_weights",
    "/finish_weight_update",
)
PACKED_BUFFERS = 2
"""Receive buffers each server alternates between (vLLM's default; the sender fills one at a time)."""


class WeightTransferUnavailable(RuntimeError):
    """The NCCL path cannot run here; the message names the alternatives."""


@dataclass(frozen=True)
class NcclSettings:
    """Where the servers meet the trainer, and how the weights travel (``rollout.transfer``)."""

    address: str | None = None
    """The trainer main process's host as the servers reach it; None: this machine's host name."""
    port: int = 29700
    """The rendezvous port on that host (a TCP store; NCCL picks its own ports after it)."""
    buffer_bytes: int = 1 << 30
    """Bytes packed into each broadcast (a tensor larger than this travels alone)."""
    timeout_s: float = 300.0
    """Limit of every control call, and of the broadcast."""


@dataclass(frozen=True)
class TensorMeta:
    """One tensor as the servers are told to expect it, in checkpoint names."""

    name: str
    dtype: str
    """The torch dtype's name without ``torch.`` (``bfloat16``), as vLLM's ``dtype_names``."""
    shape: tuple[int, ...]


@dataclass(frozen=True)
class TransferGroup:
    """One NCCL group: the trainer at rank 0, then every worker of every server."""

    address: str
    port: int
    servers: tuple[str, ...]
    offsets: tuple[int, ...]
    """Each server's first rank (its workers take ``offset .. offset + workers - 1``)."""
    world_size: int


class Broadcaster(Protocol):
    """The trainer's end of the group (vLLM's ``PyNcclCommunicator``; a gloo stand-in in tests)."""

    def broadcast(self, tensor: Any, src: int) -> None: ...


def plan_group(urls: Sequence[str], workers: Sequence[int], address: str, port: int) -> TransferGroup:
    """The group of ``urls`` whose servers run ``workers`` workers each (TP x PP x DP)."""
    if len(urls) != len(workers) or not urls:
        raise ValueError(f"one worker count per server: {len(urls)} servers, {len(workers)} counts")
    offsets, rank = [], 1
    for url, count in zip(urls, workers, strict=True):
        if count < 1:
            raise ValueError(f"{url}: /get_world_size answered {count}")
        offsets.append(rank)
        rank += count
    return TransferGroup(address, port, tuple(urls), tuple(offsets), rank)


def check_nccl_host() -> None:
    """Refuse the NCCL path where it cannot move weights: no CUDA device, no NCCL, or no vLLM CUDA build."""
    import torch
    import torch.distributed as dist

    lacking = (
        "a CUDA device" if not torch.cuda.is_available()
        else "NCCL in torch.distributed" if not dist.is_nccl_available()
        else "vLLM's CUDA build" if not _vllm_trainer_side()
        else None
    )  # fmt: skip
    if lacking is not None:
        raise WeightTransferUnavailable(
            f"rollout.transfer.path 'nccl' needs {lacking} on the trainer's main process, and this host has "
            "none. Send the weights as files instead: rollout.transfer.path 'shared_filesystem' with "
            "rollout.weights_dir on a filesystem every server mounts; or, on one machine, rollout.backend "
            "'vllm_colocate' (the weights stay in memory). docs/training.md, Several machines."
        )


def _vllm_trainer_side() -> bool:
    """Whether vLLM's trainer-side NCCL helpers import here (they need its CUDA build)."""
    try:
        from vllm.distributed.weight_transfer.nccl_common import trainer_init  # noqa: F401
        from vllm.distributed.weight_transfer.packed_tensor import pack_tensors  # noqa: F401
    except ImportError:
        return False
    return True


def release(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a vLLM version string (``0.32.0+cu130`` -> ``(0, 32)``)."""
    parts = version.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError) as exc:
        raise WeightSyncError(f"cannot read the vLLM version {version!r}") from exc


def check_release(url: str, served: str, trainer: str | None, routes: set[str]) -> str | None:
    """Refuse a server whose vLLM the trainer cannot speak to; a warning for a release newer than this
    module's (None when there is nothing to say). Both ends pack and unpack the same way only within one
    release series, so the trainer's own vLLM must be the server's (``trainer`` None: not checked)."""
    missing = [r for r in TRANSFER_ROUTES if r not in routes]
    if missing:
        raise WeightSyncError(
            f"{url}: vLLM {served} lacks {', '.join(missing)}: start it with `rubric-grpo serve MODEL "
            "--weight-transfer nccl` (VLLM_SERVER_DEV_MODE=1 and --weight-transfer-config)"
        )
    if release(served) < WRITTEN_FOR:
        raise WeightSyncError(
            f"{url}: vLLM {served} is older than {_series(WRITTEN_FOR)}, whose weight-transfer API this "
            "trainer speaks; upgrade the server, or send files (rollout.transfer.path 'shared_filesystem')"
        )
    if trainer is not None and release(trainer) != release(served):
        raise WeightSyncError(
            f"{url}: the server runs vLLM {served} and the trainer {trainer}; the packed tensors must be cut "
            "the same way on both ends, so install one release series on both"
        )
    if release(served) > WRITTEN_FOR:
        return f"{url}: vLLM {served} is newer than the {_series(WRITTEN_FOR)} this path was written for"
    return None


def _series(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def dtype_name(tensor: Any) -> str:
    """``bfloat16`` for a ``torch.bfloat16`` tensor."""
    return str(tensor.dtype).removeprefix("torch.")


def checked(tensors: Iterator[tuple[str, Any]], metadata: Sequence[TensorMeta]) -> Iterator[tuple[str, Any]]:
    """``tensors`` as they are, each checked against what the servers were told to expect: the servers cut
    the stream by the metadata, so a tensor out of place would hang the transfer or load wrong bytes."""
    sent = 0
    for name, tensor in tensors:
        expected = metadata[sent] if sent < len(metadata) else None
        got = TensorMeta(name, dtype_name(tensor), tuple(tensor.shape))
        if got != expected:
            raise WeightSyncError(f"tensor {sent} is {got}, where the servers were told {expected}")
        sent += 1
        yield name, tensor
    if sent != len(metadata):
        raise WeightSyncError(f"sent {sent} tensors, where the servers were told {len(metadata)}")


def send_packed(
    group: Broadcaster, tensors: Iterator[tuple[str, Any]], metadata: Sequence[TensorMeta], buffer_bytes: int
) -> int:
    """Broadcast ``tensors`` from rank 0, packed as vLLM's receivers unpack them (its ``pack_tensors``: a
    buffer is sent once it holds more than ``buffer_bytes``); returns the bytes sent."""
    from vllm.distributed.weight_transfer.packed_tensor import pack_tensors

    stream, sent = checked(tensors, metadata), 0
    while (chunk := pack_tensors(stream, lambda item: item[1], buffer_bytes)) is not None:
        group.broadcast(chunk.packed_tensor, src=0)
        sent += int(chunk.packed_tensor.numel())
    return sent


def open_nccl_group(group: TransferGroup) -> Broadcaster:
    """The trainer's end of ``group``: vLLM's stateless process group and NCCL communicator, rank 0."""
    from vllm.distributed.weight_transfer.nccl_common import trainer_init

    info = {"master_address": group.address, "master_port": group.port, "world_size": group.world_size}
    communicator: Broadcaster = trainer_init(info, rank=0)
    return communicator


class NcclWeightTransfer:
    """The trainer main process's link to every server's transfer engine: :meth:`connect` once, then
    :meth:`push` after each optimiser step."""

    def __init__(
        self,
        urls: Sequence[str],
        settings: NcclSettings,
        open_group: Callable[[TransferGroup], Broadcaster] = open_nccl_group,
        trainer_vllm: str | None = None,
    ) -> None:
        self.urls = list(dict.fromkeys(normalize_base_url(u) for u in urls))
        self.settings = settings
        self.open_group = open_group
        self.trainer_vllm = trainer_vllm
        """The trainer's vLLM version, checked against each server's (None: not checked)."""
        self.group: TransferGroup | None = None
        self.broadcaster: Broadcaster | None = None
        self.broken: str | None = None
        """Why the group can no longer be used (a failed update), once it cannot."""
        self.warnings: list[str] = []
        self._client = httpx.AsyncClient(timeout=settings.timeout_s)

    async def connect(self) -> TransferGroup:
        """Check every server, plan the group, and form it: each server joins at its offset while the
        trainer opens rank 0 (both block until everyone has arrived)."""
        workers = await asyncio.gather(*(self._inspect(url) for url in self.urls))
        address = self.settings.address or socket.gethostname()
        group = plan_group(self.urls, workers, address, self.settings.port)
        joined = asyncio.gather(
            *(self._call(url, "join the NCCL group", "/init_weight_transfer_engine", json=self._init_info(
                group, offset)) for url, offset in zip(group.servers, group.offsets, strict=True))
        )  # fmt: skip
        opened = asyncio.wait_for(asyncio.to_thread(self.open_group, group), self.settings.timeout_s)
        try:
            _, self.broadcaster = await asyncio.gather(joined, opened)
        except TimeoutError as exc:
            raise WeightSyncError(
                f"the trainer's end of the NCCL group at {address}:{group.port} was not reached within "
                f"{self.settings.timeout_s:g} s: can every server reach it (rollout.transfer.address)?"
            ) from exc
        self.group = group
        return group

    def _init_info(self, group: TransferGroup, offset: int) -> dict[str, Any]:
        """vLLM's worker-side init info (``NCCLWeightTransferInitInfo``): the rendezvous, this server's rank
        offset, and the packed wire settings, which the receivers must share with the sender."""
        return {
            "init_info": {
                "master_address": group.address,
                "master_port": group.port,
                "rank_offset": offset,
                "world_size": group.world_size,
                "packed": True,
                "packed_buffer_size_bytes": self.settings.buffer_bytes,
                "packed_num_buffers": PACKED_BUFFERS,
            }
        }

    async def _inspect(self, url: str) -> int:
        """A server's worker count, once its vLLM release and routes are checked."""
        version = (await self._get(url, "/version")).get("version", "?")
        routes = set((await self._get(url, "/openapi.json")).get("paths", {}))
        warning = check_release(url, str(version), self.trainer_vllm, routes)
        if warning is not None:
            self.warnings.append(warning)
        return int((await self._get(url, "/get_world_size")).get("world_size", 0))

    async def _get(self, url: str, route: str) -> dict[str, Any]:
        try:
            resp = await self._client.get(f"{url}{route}")
            resp.raise_for_status()
            data: dict[str, Any] = resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise WeightSyncError(f"{url}: GET {route} failed: {type(exc).__name__}: {exc}") from exc
        return data

    async def _call(self, url: str, what: str, route: str, **kwargs: Any) -> Any:
        return await post_route(self._client, url, what, route, self.settings.timeout_s, **kwargs)

    async def push(
        self, tensors: Iterator[tuple[str, Any]], metadata: Sequence[TensorMeta], step: int
    ) -> dict[str, float]:
        """Send the weights of training step ``step`` to every server (the sequence in the module's
        docstring); returns ``sync/bytes``, ``sync/send_s`` (the broadcast) and ``sync/load_s`` (from the
        pause to the last server's cache reset). Every server is resumed before an error is raised."""
        if self.broken is not None:
            raise WeightSyncError(f"no weights sent at training step {step}: {self.broken}")
        if self.group is None:
            await self.connect()
        at = f"at training step {step}"
        t0 = time.perf_counter()
        try:
            await self._each(f"pause {at}", "/pause", params={"mode": "wait"})
            await self._each(f"start the weight update {at}", "/start_weight_update")
            sent, send_s = await self._update(tensors, metadata, at)
            await self._each(f"finish the weight update {at}", "/finish_weight_update")
            version = {"new_version": f"step-{step}"}
            await self._each(f"set the weight version {at}", "/update_weight_version", json=version)
            await asyncio.gather(
                *(reset_prefix_cache(self._client, u, self.settings.timeout_s) for u in self.urls)
            )
        except BaseException:
            await self._resume_all(at, raise_errors=False)  # the first error is the one to see
            raise
        await self._resume_all(at)
        return {"sync/bytes": float(sent), "sync/send_s": send_s, "sync/load_s": time.perf_counter() - t0}

    async def _each(self, what: str, route: str, **kwargs: Any) -> None:
        """``route`` on every server at once; the first failure is raised once all have answered."""
        outcomes = await asyncio.gather(
            *(self._call(url, what, route, **kwargs) for url in self.urls), return_exceptions=True
        )
        _raise_first(outcomes)

    async def _update(
        self, tensors: Iterator[tuple[str, Any]], metadata: Sequence[TensorMeta], at: str
    ) -> tuple[int, float]:
        """``/update_weights`` on every server while the tensors are broadcast on a thread of their own; a
        failure on either side ends the wait at once and leaves the group unusable."""
        assert self.broadcaster is not None
        info = {
            "names": [m.name for m in metadata],
            "dtype_names": [m.dtype for m in metadata],
            "shapes": [list(m.shape) for m in metadata],
        }
        updates = [
            asyncio.ensure_future(
                self._call(url, f"receive the weights {at}", "/update_weights", json={"update_info": info})
            )
            for url in self.urls
        ]
        sending = asyncio.ensure_future(self._broadcast(tensors, metadata, at))
        done, pending = await asyncio.wait([*updates, sending], return_when=asyncio.FIRST_EXCEPTION)
        failed = [task for task in [*updates, sending] if task in done and task.exception() is not None]
        if failed:
            for task in pending:
                task.cancel()
            self.broken = (
                f"the NCCL group broke {at} ({failed[0].exception()}); restart the servers and resume"
            )
            raise failed[0].exception()  # type: ignore[misc]
        return sending.result()

    async def _broadcast(
        self, tensors: Iterator[tuple[str, Any]], metadata: Sequence[TensorMeta], at: str
    ) -> tuple[int, float]:
        """:func:`send_packed` on a daemon thread (a server gone mid-transfer leaves it waiting for ever, and
        the trainer must still be able to exit): (bytes, seconds)."""
        assert self.broadcaster is not None
        loop = asyncio.get_running_loop()
        done: asyncio.Future[tuple[int, float]] = loop.create_future()
        broadcaster, buffer_bytes = self.broadcaster, self.settings.buffer_bytes

        def hand_over(settle: Callable[[Any], None], outcome: Any) -> None:
            # a broadcast that ends after its update failed may outlive the run's event loop: nobody waits
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, outcome)

        def run() -> None:
            t0 = time.perf_counter()
            try:
                sent = send_packed(broadcaster, tensors, metadata, buffer_bytes)
            except BaseException as exc:  # handed to the waiting coroutine
                hand_over(done.set_exception, exc)
            else:
                hand_over(done.set_result, (sent, time.perf_counter() - t0))

        threading.Thread(target=run, name="rubric-grpo-weights-broadcast", daemon=True).start()
        try:
            return await asyncio.wait_for(asyncio.shield(done), self.settings.timeout_s)
        except TimeoutError as exc:
            raise WeightSyncError(
                f"the trainer's broadcast of the weights {at} took over {self.settings.timeout_s:g} s"
            ) from exc

    async def _resume_all(self, at: str, raise_errors: bool = True) -> None:
        """``/resume`` on every server, whatever happened before."""
        outcomes = await asyncio.gather(
            *(self._call(url, f"resume {at}", "/resume") for url in self.urls), return_exceptions=True
        )
        if raise_errors:
            _raise_first(outcomes)

    async def close(self) -> None:
        """Close the HTTP connections (the servers keep their end of the group until they stop)."""
        await self._client.aclose()


def _raise_first(outcomes: Sequence[object]) -> None:
    """Raise the first exception among ``asyncio.gather``'s outcomes (several servers' errors joined)."""
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise WeightSyncError("; ".join(str(e) for e in errors)) from errors[0]
