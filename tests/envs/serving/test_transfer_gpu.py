"""Exact weights over NCCL to a real vLLM server (marked ``gpu``; ``scripts/gpu_check.sh`` runs it): needs two
CUDA devices (NCCL puts no two ranks of a group on one device: the server takes the second, the trainer the
first) and vLLM's CUDA build. Skipped elsewhere, with the reason.

One server, two ways in, compared by vLLM's own digest of every tensor it holds (``/weight_checker``): the
step's weights loaded from a file (the known-good path) give the reference digests; the server's weights are
then zeroed, so that nothing of the file survives, and the same weights sent over NCCL must give the same
digests, every tensor, not only the same outputs."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest

from tests.support.weight_digests import weight_digests

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.vllm, pytest.mark.slow]


def _usable_or_skip() -> None:
    from envs.serving.transfer import WeightTransferUnavailable, check_nccl_host

    try:
        check_nccl_host()
    except WeightTransferUnavailable as exc:
        pytest.skip(f"the NCCL path cannot run here: {str(exc)[:120]}")
    if torch.cuda.device_count() < 2:
        pytest.skip("NCCL needs the trainer and the server on two CUDA devices; this host has one")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _step_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    """The model's weights moved as a training step would move them, on the trainer's device."""
    from safetensors.torch import load_file

    gen = torch.Generator().manual_seed(1)
    weights = load_file(str(model_dir / "model.safetensors"))
    return {n: (t + 0.01 * torch.randn(t.shape, generator=gen)).to("cuda:0") for n, t in weights.items()}


def test_every_tensor_sent_over_nccl_hashes_as_the_file_loaded_one(tiny_model_dir: Path) -> None:
    _usable_or_skip()
    import vllm

    from envs.serving.launch import rl_server
    from envs.serving.transfer import NcclSettings, NcclWeightTransfer, TensorMeta, dtype_name
    from envs.serving.weights import push_weights

    weights = _step_weights(tiny_model_dir)
    server = rl_server(
        tiny_model_dir,
        port=None,
        weight_transfer="nccl",
        extra_args=["--gpu-memory-utilization", "0.3"],
        env={"CUDA_VISIBLE_DEVICES": "1"},
    )
    with server:
        url = server.base_url
        asyncio.run(push_weights(url, {n: t.cpu() for n, t in weights.items()}, weight_version="file"))
        reference = weight_digests(url)
        httpx.post(f"{url}/weight_checker", json={"action": "reset"}, timeout=60).raise_for_status()
        zeroed = weight_digests(url)
        assert all(
            zeroed[name] != digest for name, digest in reference.items()
        )  # nothing of the file is left
        settings = NcclSettings(address="127.0.0.1", port=_free_port(), buffer_bytes=1 << 16)
        transfer = NcclWeightTransfer([url], settings, trainer_vllm=vllm.__version__)
        metadata = [TensorMeta(n, dtype_name(t), tuple(t.shape)) for n, t in weights.items()]

        async def send() -> dict[str, float]:
            try:
                return await transfer.push(iter(weights.items()), metadata, step=1)
            finally:
                await transfer.close()

        stats = asyncio.run(send())
        assert weight_digests(url) == reference
        assert httpx.get(f"{url}/weight_info").json()["weight_version"] == "step-1"
    assert stats["sync/bytes"] == sum(t.numel() * t.element_size() for t in weights.values())
