"""The NCCL path's data plane on CPU: the trainer's processes send a policy's weights, two stand-in servers
receive them, over vLLM's stateless process group (the group vLLM's NCCL communicator is built on), packed and
unpacked by vLLM's own code.

    accelerate launch --config_file configs/accelerate/deepspeed_zero3.yaml \\
        tests/support/transfer_driver.py send MODEL_DIR OUT PORT BUFFER_BYTES
    python tests/support/transfer_driver.py receive MODEL_DIR OUT PORT BUFFER_BYTES RANK

``send`` loads the policy as the trainer does (under ZeRO-3 every parameter sharded); its main process joins
the group at rank 0, tells the receivers what to expect (as ``/update_weights`` tells a server) and runs
``send_packed`` on ``checkpoint_tensors``, which gathers one module at a time; the other process only joins the
gathers. ``receive`` (ranks 1 and 2, as two servers at their rank offsets) runs vLLM's receive loop
(``packed_nccl_broadcast_consumer``, its CUDA streams replaced by nothing on this CPU host) and writes what it
unpacked to ``OUT/received-RANK.safetensors``; the test compares it with the model's file.
"""

from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
WORLD = 3  # the trainer's main process and two receivers


class StoreBroadcaster:
    """``broadcast(tensor, src)`` in place, as NCCL's, over a ``StatelessProcessGroup`` (its TCP store)."""

    def __init__(self, group: Any) -> None:
        self.group = group

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        got = self.group.broadcast(tensor, src=src)
        if self.group.rank != src:
            tensor.copy_(got)


def _group(port: int, rank: int) -> Any:
    from vllm.distributed.utils import StatelessProcessGroup

    return StatelessProcessGroup.create(host="127.0.0.1", port=port, rank=rank, world_size=WORLD)


def send(model_dir: str, out: str, port: int, buffer_bytes: int) -> None:
    from envs.backends.vllm_engine import checkpoint_metadata, checkpoint_tensors
    from envs.serving.transfer import send_packed
    from train.config_files import load_config
    from train.distributed import make_accelerator
    from train.policy import load_policy

    overrides = [f"model.name_or_path={model_dir}", f"logging.output_dir={out}"]
    overrides += ["rollout.backend=vllm", "rollout.vllm_urls=[http://unused:1]"]
    cfg = load_config(ROOT / "configs/train/tiny_test.yaml", overrides)
    accelerator = make_accelerator(cfg)
    plugin = accelerator.state.deepspeed_plugin
    if plugin is not None and plugin.deepspeed_config["zero_optimization"].get("stage") == 3:
        plugin.deepspeed_config["zero_optimization"]["stage3_param_persistence_threshold"] = 0  # shard all
    policy = load_policy(cfg, accelerator)  # held: DeepSpeed's engine owns the shards' storage
    module = accelerator.unwrap_model(policy.model)
    sharded = any(p.numel() == 0 for p in module.parameters())
    if accelerator.is_main_process:
        group = _group(port, 0)
        metadata = checkpoint_metadata(module)
        group.broadcast_obj([asdict(m) for m in metadata], src=0)  # what /update_weights carries
        sent = send_packed(StoreBroadcaster(group), checkpoint_tensors(module), metadata, buffer_bytes)
        report = {"bytes": sent, "tensors": len(metadata), "sharded": sharded}
        Path(out, "sent.json").write_text(json.dumps(report))
        group.barrier()
    else:
        for _ in checkpoint_tensors(module):  # the gathers are collective
            pass
    accelerator.wait_for_everyone()


def _without_cuda_streams() -> None:
    """vLLM's receive loop orders its buffers on CUDA streams; a CPU host has none, and needs none."""
    import vllm.distributed.weight_transfer.packed_tensor as packed

    class NoStream:
        def synchronize(self) -> None:
            return None

    packed._get_streams = lambda device, count: tuple(NoStream() for _ in range(count))  # type: ignore[assignment]
    torch.cuda.stream = lambda stream: contextlib.nullcontext()  # type: ignore[assignment,method-assign]
    torch.accelerator.current_device_index = lambda: 0  # type: ignore[method-assign]


def receive(out: str, port: int, buffer_bytes: int, rank: int) -> None:
    from safetensors.torch import save_file
    from vllm.distributed.weight_transfer.packed_tensor import packed_nccl_broadcast_consumer

    _without_cuda_streams()
    group = _group(port, rank)
    expected = group.broadcast_obj(None, src=0)
    received: dict[str, torch.Tensor] = {}
    packed_nccl_broadcast_consumer(
        iterator=((m["name"], (list(m["shape"]), getattr(torch, m["dtype"]))) for m in expected),
        group=StoreBroadcaster(group),
        src=0,
        post_unpack_func=lambda pairs: received.update((n, t.clone()) for n, t in pairs),
        buffer_size_bytes=buffer_bytes,
        num_buffers=2,
        device="cpu",
    )
    save_file(received, str(Path(out, f"received-{rank}.safetensors")))
    group.barrier()


if __name__ == "__main__":
    role, model_dir, out, port, buffer_bytes = sys.argv[1:6]
    if role == "send":
        send(model_dir, out, int(port), int(buffer_bytes))
    else:
        receive(out, int(port), int(buffer_bytes), int(sys.argv[6]))
    sys.stdout.flush()
    sys.stderr.flush()
