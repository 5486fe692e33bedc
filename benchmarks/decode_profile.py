"""Where the local backend's sampling time goes: one batch of rows decoded exactly as ``LocalBackend`` decodes
it (``envs.backends.decode.decode`` inside ``packed_linears``, the sampling copy in the dtype the trainer
would pick), timed, then profiled once with ``torch.profiler``; and, with ``--lengths N``, whether free
completions from one chat prompt run as long through our sampler as through transformers' ``generate``.

    .venv/bin/python benchmarks/decode_profile.py [--model smollm2] [--rows 8] [--tokens 96] [--lengths 32] [--fused-projections]
        [--second-thread] [--dtype float32] [--concatenated-cache] [--without-products]

Every row is forced to ``--tokens`` tokens (``min_new_tokens``), so the work is fixed. Prints one JSON object:
the best decode time of ``--repeats``, milliseconds per decode forward, linear-layer calls per forward, and the
share of the profiled CPU time of the operators that took the most (self time); with ``--lengths``, the mean
completion length of N samples at temperature 1 through each sampler (same prompt, same limit, top-k off);
with ``--fused-projections``, the same decode timed with each layer's q/k/v and gate/up projections fused into
one matrix product each (interleaved with the plain one), and the share of greedy tokens the two agree on;
with ``--second-thread``, the decode on this thread, then on a second thread, then on this thread again;
with ``--concatenated-cache``, the same sampled decode with the KV cache concatenated per token (transformers'
``DynamicLayer``) against written in place (``envs.backends.decode.keys_in_place``), interleaved, and
whether their tokens and logprobs are equal; with ``--without-products``, the same decode with every linear
layer returning zeros instead of its product (interleaved with the real one): what a forward costs outside
the products. ``--dtype`` forces the sampling dtype (float32: the slow kind's).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPT = [{"role": "user", "content": "You arrive at a car crash on a quiet road. What do you do first?"}]


def _prompt_ids(model: Any, rows: int) -> Any:
    """[rows, 48] random prompt tokens, the same on every call."""
    import torch

    return torch.randint(0, model.config.vocab_size, (rows, 48), generator=torch.Generator().manual_seed(0))


def _decode_once(model: Any, rows: int, tokens: int, stop_id: int, pad_id: int) -> tuple[float, int]:
    import torch

    from envs.backends.decode import DecodeStats, Decoding, decode

    ids = _prompt_ids(model, rows)
    how = Decoding(tokens, tokens, temperature=1.0, top_p=1.0, stop_ids=[stop_id], pad_id=pad_id)
    stats = DecodeStats()
    started = time.perf_counter()
    decode(model, ids, torch.ones_like(ids), None, how, stats)
    return time.perf_counter() - started, stats.forwards


def profile_decode(model: Any, args: argparse.Namespace, stop_id: int, pad_id: int) -> dict[str, Any]:
    """The best of ``args.repeats`` timed decodes (after a warm-up), then one under the profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from envs.backends.decode import packed_linears

    with torch.inference_mode(), packed_linears(model):
        _decode_once(model, args.rows, args.tokens, stop_id, pad_id)
        runs = [_decode_once(model, args.rows, args.tokens, stop_id, pad_id) for _ in range(args.repeats)]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            _, forwards = _decode_once(model, args.rows, args.tokens, stop_id, pad_id)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[: args.top]
    linear_calls = sum(e.count for e in events if e.key in ("mkldnn::_linear_pointwise", "aten::linear"))
    best = min(s for s, _ in runs)
    return {
        "decode_s": [round(s, 3) for s, _ in runs],
        "ms_per_forward": round(1000 * best / forwards, 2),
        "forwards": forwards,
        "linear_calls_per_forward": round(linear_calls / forwards, 1),
        "self_cpu_share": {e.key: round(e.self_cpu_time_total / total, 3) for e in top},
        "calls_per_forward": {e.key: round(e.count / forwards, 1) for e in top},
    }


@contextlib.contextmanager
def fused_projections(model: Any) -> Iterator[None]:
    """Within the block (inside ``packed_linears``), each layer's q/k/v projections run as one packed matrix
    product, and so do its gate/up projections: the first projection of a set computes all of them and the
    others return their share of that product for the same input. Llama-style layers without biases only."""
    import torch

    saved = []
    for layer in model.model.layers:
        for owner, names in (
            (layer.self_attn, ("q_proj", "k_proj", "v_proj")),
            (layer.mlp, ("gate_proj", "up_proj")),
        ):
            linears = [getattr(owner, n) for n in names]
            weight = torch.cat([lin.weight.detach() for lin in linears])
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, 8)
            sizes = [lin.weight.shape[0] for lin in linears]
            saved += [(lin, lin.forward) for lin in linears]
            shared: dict[str, Any] = {}

            def first(
                x: Any, packed: Any = packed, sizes: list[int] = sizes, shared: dict[str, Any] = shared
            ) -> Any:
                parts = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "").split(
                    sizes, dim=-1
                )
                shared["input"], shared["parts"] = x, parts
                return parts[0]

            def share(x: Any, i: int, shared: dict[str, Any] = shared) -> Any:
                assert x is shared["input"], "a fused projection got another input than the first one"
                return shared["parts"][i]

            linears[0].forward = first
            for i, lin in enumerate(linears[1:], 1):
                lin.forward = functools.partial(share, i=i)
    try:
        yield
    finally:
        for lin, forward in saved:
            lin.forward = forward


@contextlib.contextmanager
def without_products(model: Any) -> Iterator[None]:
    """Within the block (inside ``packed_linears``) every linear layer returns zeros of its output's shape
    instead of computing its product: a forward's cost outside the products (the other operators, the
    modules' Python, the sampling)."""
    import torch

    def zeros(width: int) -> Any:
        return lambda x: x.new_zeros(*x.shape[:-1], width)

    saved = []
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            saved.append((module, module.__dict__.get("forward")))  # packed_linears' forward, or None
            setattr(module, "forward", zeros(module.out_features))  # noqa: B010 (an instance attribute)
    try:
        yield
    finally:
        for module, forward in saved:
            if forward is None:
                del module.forward
            else:
                setattr(module, "forward", forward)  # noqa: B010


def _interleaved(
    model: Any, args: argparse.Namespace, stop_id: int, pad_id: int, variant: Any
) -> tuple[list[float], list[float]]:
    """Seconds of ``args.repeats`` decodes as they run and as many within ``variant(model)`` (a context
    manager), in turns after a warm-up, inside ``packed_linears``."""
    import torch

    from envs.backends.decode import packed_linears

    plain: list[float] = []
    varied: list[float] = []
    with torch.inference_mode(), packed_linears(model):
        _decode_once(model, args.rows, args.tokens, stop_id, pad_id)
        for _ in range(args.repeats):
            plain.append(_decode_once(model, args.rows, args.tokens, stop_id, pad_id)[0])
            with variant(model):
                varied.append(_decode_once(model, args.rows, args.tokens, stop_id, pad_id)[0])
    return plain, varied


def compare_without_products(
    model: Any, args: argparse.Namespace, stop_id: int, pad_id: int
) -> dict[str, Any]:
    """The decode as it runs and ``without_products``, interleaved, best of ``args.repeats`` each."""
    with_products, without = _interleaved(model, args, stop_id, pad_id, without_products)
    out: dict[str, Any] = {
        "with_products_s": [round(t, 3) for t in with_products],
        "without_products_s": [round(t, 3) for t in without],
    }
    out["ms_per_forward_without_products"] = round(1000 * min(without) / args.tokens, 2)
    out["without_over_with"] = round(min(without) / min(with_products), 3)
    return out


def compare_fused(model: Any, args: argparse.Namespace, stop_id: int, pad_id: int) -> dict[str, Any]:
    """The same decode with and without ``fused_projections``, interleaved, best of ``args.repeats`` each;
    and how many greedy tokens the two agree on (bf16 sums in another order drift apart)."""
    import torch

    from envs.backends.decode import packed_linears

    separate_s, fused_s = _interleaved(model, args, stop_id, pad_id, fused_projections)
    times = {"separate_s": separate_s, "fused_s": fused_s}
    with torch.inference_mode(), packed_linears(model):
        separate = _greedy(model, args.rows, args.tokens, stop_id, pad_id)
        with fused_projections(model):
            fused = _greedy(model, args.rows, args.tokens, stop_id, pad_id)
    out: dict[str, Any] = {k: [round(t, 3) for t in v] for k, v in times.items()}
    out["fused_over_separate"] = round(min(times["fused_s"]) / min(times["separate_s"]), 3)
    out["greedy_token_agreement"] = round(float((separate == fused).float().mean()), 3)
    return out


@contextlib.contextmanager
def concatenated_cache() -> Iterator[None]:
    """Within the block the decode keeps transformers' own ``DynamicLayer`` s, which concatenate each new
    key and value onto the whole cache (``envs.backends.decode.keys_in_place`` switched off)."""
    from envs.backends import decode as decode_module

    saved = decode_module.keys_in_place
    decode_module.keys_in_place = lambda cache, room: cache
    try:
        yield
    finally:
        decode_module.keys_in_place = saved


def compare_cache_growth(model: Any, args: argparse.Namespace, stop_id: int, pad_id: int) -> dict[str, Any]:
    """The same sampled decode (the same seed) with each token's keys and values written in place and with
    them concatenated onto the cache, interleaved, best of ``args.repeats`` each; whether the tokens and
    logprobs are the same."""
    import torch

    from envs.backends.decode import Decoding, decode, packed_linears

    ids = _prompt_ids(model, args.rows)
    how = Decoding(args.tokens, args.tokens, temperature=1.0, top_p=1.0, stop_ids=[stop_id], pad_id=pad_id)

    def once() -> tuple[float, Any]:
        torch.manual_seed(1)
        started = time.perf_counter()
        out = decode(model, ids, torch.ones_like(ids), None, how)
        return time.perf_counter() - started, out

    times: dict[str, list[float]] = {"in_place_s": [], "concatenated_s": []}
    with torch.inference_mode(), packed_linears(model):
        once()
        for _ in range(args.repeats):
            seconds, in_place = once()
            times["in_place_s"].append(seconds)
            with concatenated_cache():
                seconds, concatenated = once()
            times["concatenated_s"].append(seconds)
    out: dict[str, Any] = {k: [round(t, 3) for t in v] for k, v in times.items()}
    out["in_place_over_concatenated"] = round(min(times["in_place_s"]) / min(times["concatenated_s"]), 3)
    out["same_tokens"] = bool(torch.equal(in_place[0], concatenated[0]))
    out["same_logprobs"] = bool(torch.equal(in_place[1], concatenated[1]))
    return out


def _greedy(model: Any, rows: int, tokens: int, stop_id: int, pad_id: int) -> Any:
    import torch

    from envs.backends.decode import Decoding, decode

    ids = _prompt_ids(model, rows)
    how = Decoding(tokens, tokens, temperature=0.0, top_p=1.0, stop_ids=[stop_id], pad_id=pad_id)
    return decode(model, ids, torch.ones_like(ids), None, how)[0]


def second_thread(model: Any, args: argparse.Namespace, stop_id: int, pad_id: int) -> dict[str, Any]:
    """The same decode timed on one thread, then on a second thread, then on the first again: each thread
    that runs torch's parallel regions gets an OpenMP team of its own, and two teams on this machine's cores
    may slow every later decode (the trainer generates on the backend's thread and loads on the main one)."""
    import concurrent.futures

    import torch

    from envs.backends.decode import packed_linears

    def timed() -> float:
        with torch.inference_mode(), packed_linears(model):
            return _decode_once(model, args.rows, args.tokens, stop_id, pad_id)[0]

    timed()  # the warm-up, on this thread
    first = [timed() for _ in range(args.repeats)]
    with concurrent.futures.ThreadPoolExecutor(1) as other:
        second = [other.submit(timed).result() for _ in range(args.repeats)]
    again = [timed() for _ in range(args.repeats)]
    return {
        "first_thread_s": [round(t, 3) for t in first],
        "second_thread_s": [round(t, 3) for t in second],
        "first_thread_again_s": [round(t, 3) for t in again],
    }


def compare_lengths(model_dir: Path, n: int, tokens: int) -> dict[str, Any]:
    """Mean completion length of ``n`` free samples from ``PROMPT`` through our local backend and through
    transformers' ``generate`` on the same float32 model (temperature 1, top-p 1, top-k off)."""
    import torch
    from transformers import AutoTokenizer

    from envs.backends.base import SamplingParams, plain_generate_kwargs
    from envs.build import make_backend
    from envs.models.loading import load_causal_lm

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    encoded: Any = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, return_dict=True)
    ids = list(encoded["input_ids"])
    backend, _ = make_backend("local", model_dir, sampling_dtype=None)
    params = SamplingParams(n=n, temperature=1.0, top_p=1.0, max_tokens=tokens, seed=0)
    ours = [len(s.completion_ids) for s in asyncio.run(backend.generate(ids, params))]
    model = load_causal_lm(model_dir, dtype=torch.float32, attn_implementation="sdpa").eval()
    torch.manual_seed(0)
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([ids] * n),
            attention_mask=torch.ones(n, len(ids), dtype=torch.long),
            do_sample=True,
            max_new_tokens=tokens,
            **{**plain_generate_kwargs(), "temperature": 1.0, "top_p": 1.0, "top_k": 0},
        )
    eos = tokenizer.eos_token_id
    theirs = []
    for row in out[:, len(ids) :].tolist():
        theirs.append(row.index(eos) + 1 if eos in row else len(row))
    return {
        "samples": n,
        "ours_mean_tokens": statistics.mean(ours),
        "generate_mean_tokens": statistics.mean(theirs),
    }


def main() -> None:
    import torch

    from envs.models import resolve_model
    from envs.models.loading import load_causal_lm
    from train.distributed import resolve_inference_dtype

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="a name envs.models resolves, or a local folder")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16"],
        help="the sampling copy's dtype (auto: the trainer's pick here; float32 is the slow kind's)",
    )
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top", type=int, default=10, help="operators listed")
    parser.add_argument("--lengths", type=int, default=0, help="also compare free lengths over N samples")
    parser.add_argument(
        "--second-thread",
        action="store_true",
        help="also time the decode before and after a second thread ran one",
    )
    parser.add_argument(
        "--fused-projections", action="store_true", help="also time the decode with q/k/v and gate/up fused"
    )
    parser.add_argument(
        "--concatenated-cache",
        action="store_true",
        help="also time the decode with the KV cache concatenated per token instead of written in place",
    )
    parser.add_argument(
        "--without-products",
        action="store_true",
        help="also time the decode with every linear layer's product skipped (zeros returned)",
    )
    args = parser.parse_args()
    model_dir = Path(resolve_model(args.model))
    # "auto": what the trainer's local backend samples in here (None: the float32 policy itself)
    dtype = (resolve_inference_dtype("auto") if args.dtype == "auto" else args.dtype) or "float32"
    model = load_causal_lm(model_dir, dtype=getattr(torch, dtype), attn_implementation="sdpa").eval()
    eos = int(model.config.eos_token_id if isinstance(model.config.eos_token_id, int) else 2)
    result: dict[str, Any] = {
        "model": str(model_dir),
        "dtype": dtype,
        "rows": args.rows,
        "tokens": args.tokens,
    }
    result.update(profile_decode(model, args, stop_id=eos, pad_id=eos))
    if args.fused_projections:
        result["fused_projections"] = compare_fused(model, args, stop_id=eos, pad_id=eos)
    if args.without_products:
        result["without_products"] = compare_without_products(model, args, stop_id=eos, pad_id=eos)
    if args.concatenated_cache:
        result["cache_growth"] = compare_cache_growth(model, args, stop_id=eos, pad_id=eos)
    if args.lengths:
        result["lengths"] = compare_lengths(model_dir, args.lengths, args.tokens)
    if args.second_thread:  # last: what it measures lasts for the rest of the process
        result["second_thread"] = second_thread(model, args, stop_id=eos, pad_id=eos)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
