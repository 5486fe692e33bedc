"""The weight sync of a LoRA run to vLLM: the adapter alone, against the merged model's every weight.

    .venv/bin/python benchmarks/adapter_sync.py [--model smollm2] [--rank 16] [--syncs 5]

The policy is ``--model`` with an adapter of ``--rank`` on every linear layer (``train.lora.adapt``), its B
drawn at random so that it changes the model. Arm ``adapter``: ``VllmBackend.sync_weights`` as a LoRA run
calls it (write the adapter to /dev/shm, ``/v1/load_lora_adapter`` under a new name, unload the previous),
against a server started with ``--lora-rank``. Arm ``full``: what a LoRA run had to do before, merge the
adapter and push every weight (``push_weights``: write one safetensors file, pause, reload in place, resume),
against a plain RL server. Each server runs alone (one after the other, float32 on CPU hosts); each arm
syncs ``--syncs`` times after one warm-up sync, with ``rollout.check_sync``'s greedy check after the last.
Prints one JSON object: per arm the bytes sent, and the seconds of each sync (wall, writing, loading).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _policy(model_dir: Path, rank: int) -> Any:
    import torch

    from envs.models.loading import load_causal_lm
    from train.config import LoraConfig
    from train.lora import adapt

    model = adapt(
        load_causal_lm(model_dir, dtype=torch.float32, attn_implementation="sdpa"), LoraConfig(r=rank)
    )
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.01)
    return model.eval()


def _summary(walls: list[float], rows: list[dict[str, float]]) -> dict[str, Any]:
    return {
        "bytes": rows[-1]["bytes"],
        "wall_s": [round(w, 4) for w in walls],
        "wall_s_median": round(statistics.median(walls), 4),
        "save_s_median": round(statistics.median(r["save_s"] for r in rows), 4),
        "load_s_median": round(statistics.median(r["load_s"] for r in rows), 4),
    }


async def _adapter_arm(url: str, model_dir: Path, policy: Any, tokenizer: Any, syncs: int) -> dict[str, Any]:
    from envs.backends.base import OneProcessWeights
    from envs.backends.vllm import VllmBackend

    weights = OneProcessWeights(policy)
    walls, rows = [], []
    async with VllmBackend([url], str(model_dir)) as backend:
        for step in range(syncs + 1):
            t0 = time.perf_counter()
            await backend.sync_weights(weights, step + 1)
            if step:  # the first is the warm-up
                walls.append(time.perf_counter() - t0)
                rows.append({k.removeprefix("sync/"): v for k, v in backend.sync_stats.items()})
        await backend.check_sync(weights, tokenizer)
    return _summary(walls, rows)


async def _full_arm(url: str, model_dir: Path, policy: Any, tokenizer: Any, syncs: int) -> dict[str, Any]:
    from envs.backends.base import OneProcessWeights, compare_greedy
    from envs.backends.vllm import VllmBackend
    from envs.models.adapters import merged_state_dict, plain_copy
    from envs.serving.weights import push_weights

    walls, rows = [], []
    for step in range(syncs + 1):
        t0 = time.perf_counter()
        pushed = await push_weights(url, merged_state_dict(policy), weight_version=f"step-{step + 1}")
        if step:
            walls.append(time.perf_counter() - t0)
            load = max(pushed.server_seconds.values())
            rows.append({"bytes": float(pushed.bytes), "save_s": pushed.save_seconds, "load_s": load})
    async with VllmBackend([url], str(model_dir)) as backend:
        await compare_greedy(backend, OneProcessWeights(plain_copy(policy)), tokenizer)
    return _summary(walls, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="'smollm2' or a local model folder")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--syncs", type=int, default=5)
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from envs.models import resolve_model
    from envs.serving.launch import rl_server

    model_dir = Path(resolve_model(args.model))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    policy = _policy(model_dir, args.rank)
    out: dict[str, Any] = {"model": str(model_dir), "rank": args.rank, "syncs": args.syncs}
    arms = {"adapter": (_adapter_arm, args.rank), "full": (_full_arm, None)}
    for arm, (run, lora_rank) in arms.items():
        with rl_server(model_dir, port=None, max_model_len=1024, lora_rank=lora_rank) as server:
            out[arm] = asyncio.run(run(server.base_url, model_dir, policy, tokenizer, args.syncs))
    out["bytes_ratio"] = round(out["full"]["bytes"] / out["adapter"]["bytes"], 2)
    out["wall_ratio"] = round(out["full"]["wall_s_median"] / out["adapter"]["wall_s_median"], 2)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
