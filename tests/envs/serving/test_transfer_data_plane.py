"""The NCCL path's data plane between processes, on CPU (``tests/support/transfer_driver.py``): the trainer's
``send_packed`` against vLLM's own receive loop, over vLLM's stateless process group in place of NCCL. Two
receivers stand for two servers at rank offsets 1 and 2; each must hold every tensor of the checkpoint, bit for
bit, in small buffers that cut the stream in many places. Under ZeRO-3 (two trainer processes, every
parameter sharded) the sender gathers one module at a time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train.test_distributed import REPO_ROOT, TIMEOUT_S, _free_port, launch_env

torch = pytest.importorskip("torch")
pytest.importorskip("vllm.distributed.weight_transfer.packed_tensor", reason="needs vLLM (--with-vllm)")
pytest.importorskip("accelerate")

DRIVER = "tests/support/transfer_driver.py"
BUFFER_BYTES = 20_000  # a few tensors a buffer: the tiny model's embedding (over 40 kB) travels alone


def _run(senders: list[str], model_dir: Path, out: Path) -> list[subprocess.CompletedProcess[str]]:
    """The sender's command and both receivers, all at once, all waited for."""
    port = str(_free_port())
    args = [str(model_dir), str(out), port, str(BUFFER_BYTES)]
    commands = [
        [*senders, DRIVER, "send", *args],
        *([sys.executable, DRIVER, "receive", *args, str(rank)] for rank in (1, 2)),
    ]
    procs = [
        subprocess.Popen(
            c, cwd=REPO_ROOT, env=launch_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for c in commands
    ]
    done = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    return done


def _checkpoint(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


@pytest.mark.slow
@pytest.mark.parametrize("launch", ["one_process", "zero3"])
def test_each_receiver_holds_every_tensor_bit_for_bit(
    tiny_model_dir: Path, tmp_path: Path, launch: str
) -> None:
    from safetensors.torch import load_file

    senders = [sys.executable]
    if launch == "zero3":
        pytest.importorskip("deepspeed")
        port = str(_free_port())
        senders += [
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            "configs/accelerate/deepspeed_zero3.yaml",
        ]
        senders += ["--main_process_port", port]
    done = _run(senders, tiny_model_dir, tmp_path)
    for proc in done:
        assert proc.returncode == 0, proc.stderr[-3000:]
    sent = json.loads((tmp_path / "sent.json").read_text())
    assert sent["sharded"] == (launch == "zero3")  # the sender had shards to gather, or whole tensors
    checkpoint = _checkpoint(tiny_model_dir)
    assert sent["tensors"] == len(checkpoint)
    assert sent["bytes"] == sum(t.numel() * t.element_size() for t in checkpoint.values())
    for rank in (1, 2):
        received = load_file(str(tmp_path / f"received-{rank}.safetensors"))
        assert sorted(received) == sorted(checkpoint)
        for name, tensor in checkpoint.items():
            assert received[name].dtype == tensor.dtype and torch.equal(received[name], tensor), name
