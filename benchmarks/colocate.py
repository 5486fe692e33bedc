"""The colocated vLLM engine against the other two ways to sample, side by side in one run: the weight sync
(in memory against the server's file), and completion tokens a second at the main job's shape.

    .venv/bin/python benchmarks/colocate.py [--model smollm2] [--completions 8] [--tokens 80] [--syncs 5]
        [--rank 16] [--repeats 3] [--dtypes float32,bfloat16]

Sync, per step, of the same policy (SmolLM2-135M-Instruct in float32 by default):

- ``colocated_full``: ``ColocatedVllmBackend.sync_weights`` of every weight, in memory (the worker's in-place
  reload from the policy's tensors);
- ``server_full``: ``VllmBackend.sync_weights`` to a ``vllm serve`` (write one safetensors file to /dev/shm,
  pause, reload it in place, resume);
- ``colocated_lora``: a LoRA policy (``--rank`` on every linear layer, B random) into the engine: its merged
  weights, in memory;
- ``server_lora``: the same policy's adapter alone to a server started with ``--lora-rank`` (write it, load
  it under a new name, unload the previous).

Each arm syncs ``--syncs`` times after one warm-up sync and ends with ``rollout.check_sync``'s greedy check.
Throughput: ``--completions`` concurrent single-completion requests of exactly ``--tokens`` tokens
(``min_tokens``) on one chat prompt, as a trainer sends them: the main job's step is 2 prompts x 4 rollouts
of at most 80 tokens. Arms: the local backend, the colocated engine in each of ``--dtypes``, and
a vLLM server (float32 on a CPU) through ``VllmBackend``; best of ``--repeats`` after a warm-up. The local
backend is timed twice: as the main job runs it (``local:auto``: a bf16 copy where bf16 is native, else the
float32 policy) and from the float32 policy itself (``local:float32``).

Every arm runs in its own subprocess, one after the other (a vLLM CPU worker keeps its cores busy while it
lives, and binds its threads). Prints one JSON object; ``*_over_*`` are ratios of the arms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPT = [{"role": "user", "content": "You arrive at a car crash on a quiet road. What do you do first?"}]


def _plain_policy(model_dir: Path) -> Any:
    """The model in float32 with its weights nudged (so that a sync changes what the engine holds)."""
    import torch

    from envs.models.loading import load_causal_lm

    model = load_causal_lm(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 1e-4)
    return model.eval()


async def _throughput(
    backend: Any, prompt_ids: list[int], n: int, tokens: int, repeats: int
) -> dict[str, Any]:
    from envs.backends.base import SamplingParams

    params = SamplingParams(n=1, temperature=1.0, max_tokens=tokens, min_tokens=tokens)
    runs = []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        groups = await asyncio.gather(*(backend.generate(prompt_ids, params) for _ in range(n)))
        seconds = time.perf_counter() - t0
        produced = sum(len(s.completion_ids) for g in groups for s in g)
        if i:  # the first is the warm-up
            runs.append((seconds, produced))
    seconds, produced = min(runs)
    return {"tokens": produced, "seconds": round(seconds, 3), "tokens_per_s": round(produced / seconds, 1)}


async def _syncs(backend: Any, policy: Any, tokenizer: Any, syncs: int) -> dict[str, Any]:
    from envs.backends.base import OneProcessWeights

    weights = OneProcessWeights(policy)
    walls, stats = [], []
    for step in range(syncs + 1):
        t0 = time.perf_counter()
        await backend.sync_weights(weights, step + 1)
        if step:
            walls.append(time.perf_counter() - t0)
            stats.append(dict(backend.sync_stats))
    await backend.check_sync(weights, tokenizer)
    out: dict[str, Any] = {
        "wall_s": [round(w, 4) for w in walls],
        "wall_s_median": round(statistics.median(walls), 4),
    }
    for key in stats[-1]:
        out[key.removeprefix("sync/") + ("" if key == "sync/bytes" else "_median")] = (
            stats[-1][key] if key == "sync/bytes" else round(statistics.median(s[key] for s in stats), 4)
        )
    return out


def _arm(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One arm, in this (sub)process."""
    from transformers import AutoTokenizer

    from benchmarks.adapter_sync import _policy as lora_policy
    from envs.chat import chat_ids

    model_dir = Path(spec["model_dir"])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt_ids = chat_ids(tokenizer, PROMPT)
    n, k, repeats, syncs = spec["completions"], spec["tokens"], spec["repeats"], spec["syncs"]
    if name.startswith("local"):
        from envs.backends.local import LocalBackend
        from train.distributed import resolve_inference_dtype

        dtype = resolve_inference_dtype(name.split(":")[1]) if name != "local:float32" else None
        local = LocalBackend(_plain_policy(model_dir), tokenizer, max_batch_rows=n, sampling_dtype=dtype)
        result = asyncio.run(_throughput(local, prompt_ids, n, k, repeats))
        return {**result, "sampling_dtype": dtype or "float32 (the policy)"}
    if name.startswith("colocated"):
        from envs.backends.colocate import ColocatedVllmBackend

        dtype = name.split(":")[1]

        async def colocated() -> dict[str, Any]:
            t0 = time.perf_counter()
            engine = ColocatedVllmBackend(
                model_dir, tokenizer, max_model_len=1024, kv_cache_bytes=1 << 30, dtype=dtype
            )
            out: dict[str, Any] = {"engine_start_s": round(time.perf_counter() - t0, 1)}
            out["throughput"] = await _throughput(engine, prompt_ids, n, k, repeats)
            if dtype == "float32":  # the sync arms: greedy equality needs the trainer's dtype
                out["sync_full"] = await _syncs(engine, _plain_policy(model_dir), tokenizer, syncs)
                out["sync_lora"] = await _syncs(
                    engine, lora_policy(model_dir, spec["rank"]), tokenizer, syncs
                )
            await engine.close()
            return out

        return asyncio.run(colocated())
    if name.startswith("server"):
        from envs.backends.vllm import VllmBackend
        from envs.serving.launch import rl_server

        lora = name == "server_lora"
        with rl_server(
            model_dir, port=None, max_model_len=1024, lora_rank=spec["rank"] if lora else None
        ) as srv:

            async def served() -> dict[str, Any]:
                async with VllmBackend([srv.base_url], str(model_dir), max_concurrency=n) as backend:
                    if lora:
                        return {
                            "sync_lora": await _syncs(
                                backend, lora_policy(model_dir, spec["rank"]), tokenizer, syncs
                            )
                        }
                    out = {"throughput": await _throughput(backend, prompt_ids, n, k, repeats)}
                    out["sync_full"] = await _syncs(backend, _plain_policy(model_dir), tokenizer, syncs)
                    return out

            return asyncio.run(served())
    raise ValueError(f"unknown arm {name!r}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2", help="'smollm2' or a local model folder")
    parser.add_argument("--completions", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=80)
    parser.add_argument("--syncs", type=int, default=5)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtypes", default="float32,bfloat16", help="the colocated engine's dtypes to time")
    parser.add_argument("--worker", nargs=2, metavar=("ARM", "SPEC"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(_arm(args.worker[0], json.loads(args.worker[1]))), flush=True)
        return

    import torch

    from envs.models import resolve_model
    from train.distributed import cpu_has_native_bf16

    model_dir = Path(resolve_model(args.model))
    spec = {
        "model_dir": str(model_dir),
        "completions": args.completions,
        "tokens": args.tokens,
        "repeats": args.repeats,
        "syncs": args.syncs,
        "rank": args.rank,
    }
    arms = [
        "local:auto",
        "local:float32",
        *(f"colocated:{d}" for d in args.dtypes.split(",")),
        "server",
        "server_lora",
    ]
    out: dict[str, Any] = {
        "benchmark": "colocate",
        "model": model_dir.name,
        "cpu_bf16_native": cpu_has_native_bf16(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **{k: v for k, v in spec.items() if k != "model_dir"},
    }
    for arm in arms:
        proc = subprocess.run(
            [sys.executable, __file__, "--worker", arm, json.dumps(spec)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            raise SystemExit(f"arm {arm} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        out[arm] = json.loads(lines[-1].removeprefix("RESULT "))
    rate = {arm: out[arm]["throughput"]["tokens_per_s"] for arm in arms if "throughput" in out[arm]}
    rate.update({arm: out[arm]["tokens_per_s"] for arm in arms if arm.startswith("local")})
    for arm in [a for a in rate if a.startswith("colocated")]:
        for other in ("local:auto", "local:float32", "server"):
            out[f"{arm}_over_{other}"] = round(rate[arm] / rate[other], 2)
    if "colocated:float32" in out:
        memory, server = out["colocated:float32"], out["server"]["sync_full"]
        out["sync_full_server_over_colocated"] = round(
            server["wall_s_median"] / memory["sync_full"]["wall_s_median"], 2
        )
        lora = out["server_lora"]["sync_lora"]["wall_s_median"]
        out["sync_lora_server_over_colocated"] = round(lora / memory["sync_lora"]["wall_s_median"], 2)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
