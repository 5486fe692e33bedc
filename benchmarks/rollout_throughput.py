"""Rollout throughput: the same 64 completions of 64 tokens on SmolLM2-135M-Instruct, one after the other,
through (1) our local backend, (2) raw batched transformers ``generate``, (3) our vLLM backend and
(4) plain concurrent HTTP requests to the same ``vllm serve``.

    .venv/bin/python benchmarks/rollout_throughput.py [--completions 64] [--tokens 64] [--model smollm2]

Both vLLM paths send the same request body (token ids and logprobs back). Every completion is forced to exactly ``--tokens`` tokens (``min_tokens``), so each path does the same
work. Ours are driven as a trainer drives them: 64 concurrent single-completion calls (the local backend
batches them itself). Each pair of paths is timed in interleaved passes (best of ``--repeats``). The local measurements run before the server starts (a vLLM CPU worker keeps its
cores busy). Prints one JSON object with the four tokens/s, ``vllm_efficiency`` (our vLLM backend over
plain requests) and ``local_efficiency`` (our local backend over raw ``generate``); target: both >= 0.9.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPT = [{"role": "user", "content": "You arrive at a car crash on a quiet road. What do you do first?"}]


async def ours(backend: Any, prompt_ids: list[int], n: int, tokens: int) -> int:
    from envs.backends.base import SamplingParams

    params = SamplingParams(n=1, temperature=1.0, max_tokens=tokens, min_tokens=tokens)
    groups = await asyncio.gather(*(backend.generate(prompt_ids, params) for _ in range(n)))
    return sum(len(s.completion_ids) for g in groups for s in g)


def raw_generate(model: Any, prompt_ids: list[int], n: int, tokens: int) -> int:
    import torch

    ids = torch.tensor([prompt_ids] * n)
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            pad_token_id=2,
        )
    return int(out.shape[0] * (out.shape[1] - ids.shape[1]))


async def plain_http(url: str, model: str, prompt_ids: list[int], n: int, tokens: int) -> int:
    import httpx

    body = {
        "model": model,
        "prompt": prompt_ids,
        "max_tokens": tokens,
        "min_tokens": tokens,
        "temperature": 1.0,
    }
    async with httpx.AsyncClient(timeout=600) as client:
        replies = await asyncio.gather(*(client.post(f"{url}/v1/completions", json=body) for _ in range(n)))
    return sum(r.json()["usage"]["completion_tokens"] for r in replies)


def timed_pair(fn_a: Any, fn_b: Any, repeats: int) -> tuple[tuple[float, int], tuple[float, int]]:
    """Best (seconds, tokens) of each of two paths, after a warm-up of both, passes interleaved a, b, a, b
    so that drift in the machine's load hits both alike."""
    fn_a()
    fn_b()
    runs: dict[int, list[tuple[float, int]]] = {0: [], 1: []}
    for _ in range(repeats):
        for key, fn in ((0, fn_a), (1, fn_b)):
            start = time.perf_counter()
            produced = fn()
            runs[key].append((time.perf_counter() - start, produced))
    return min(runs[0]), min(runs[1])


# over 60 lines: the benchmark's whole procedure (flags, both backends, the JSON it prints) in order
def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--completions", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--model", default="smollm2", help="'smollm2' or a local model folder")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from envs.backends.local import LocalBackend
    from envs.backends.vllm import VllmBackend
    from envs.chat import chat_ids
    from envs.models import resolve_model
    from envs.serving.launch import rl_server

    model_dir = resolve_model(args.model)
    local = LocalBackend.from_pretrained(str(model_dir), max_batch_rows=args.completions)
    prompt_ids = chat_ids(local.tokenizer, PROMPT)
    n, k = args.completions, args.tokens

    (t_local, tok_local), (t_raw, tok_raw) = timed_pair(
        lambda: asyncio.run(ours(local, prompt_ids, n, k)),
        lambda: raw_generate(local.model, prompt_ids, n, k),
        args.repeats,
    )

    with rl_server(model_dir, port=None) as server:
        url = server.base_url

        async def through_backend() -> int:
            backend = VllmBackend([url], str(model_dir), max_concurrency=n)
            try:
                return await ours(backend, prompt_ids, n, k)
            finally:
                await backend.close()

        (t_vllm, tok_vllm), (t_http, tok_http) = timed_pair(
            lambda: asyncio.run(through_backend()),
            lambda: asyncio.run(plain_http(url, str(model_dir), prompt_ids, n, k)),
            args.repeats,
        )

    rates = {
        "local_tokens_per_s": tok_local / t_local,
        "generate_tokens_per_s": tok_raw / t_raw,
        "vllm_backend_tokens_per_s": tok_vllm / t_vllm,
        "vllm_plain_http_tokens_per_s": tok_http / t_http,
    }
    print(
        json.dumps(
            {
                "benchmark": "rollout_throughput",
                "model": model_dir.name,
                "completions": n,
                "tokens_each": k,
                **{key: round(v, 1) for key, v in rates.items()},
                "local_efficiency": round(rates["local_tokens_per_s"] / rates["generate_tokens_per_s"], 3),
                "vllm_efficiency": round(
                    rates["vllm_backend_tokens_per_s"] / rates["vllm_plain_http_tokens_per_s"], 3
                ),
            }
        )
    )


if __name__ == "__main__":
    main()
