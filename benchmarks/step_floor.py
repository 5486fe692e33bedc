"""How fast this machine could run ``benchmarks/trainer_vs_trl.py``'s step at best, against how fast our
trainer's parts run it: the floor under a speed goal.

    .venv/bin/python benchmarks/step_floor.py [--model smollm2] [--rows 8] [--prompt-tokens 35]
        [--tokens 96] [--micro-batch 4] [--trl-s-per-step S]

The step's work, at trainer_vs_trl's shape (``--rows`` replies of ``--tokens`` tokens to prompts of
``--prompt-tokens``, in micro-batches of ``--micro-batch``; float32, sdpa):
- **training passes**: one micro-batch's forward and backward as the trainer runs them
  (``train.forward.forward_logprobs``, the output head over the loss positions only), its floating-point
  operations counted by torch's ``FlopCounterMode`` (the matrix products; attention's included where torch
  counts its CPU kernel) and timed (best of ``--repeats``). The floor is those operations at the best
  matrix-product rate this machine reaches: a float32 product at the layers' shape ([micro-batch positions,
  hidden] x [hidden, intermediate]) and a 2048-cube one, the faster of the two.
- **decoding**: each decode forward reads every linear weight and the output head once; ``--tokens``
  forwards a step. The floor is those bytes at this machine's streaming read rate (the sum of a 512 MiB
  tensor), and, nearer what the kernels reach, at the rate oneDNN's product reads a reordered weight at
  ``--rows`` rows (``envs.backends.decode.packed_linears``' kernel, over the model's own weights).
- **optimiser**: one fused AdamW step with clipping over the weights (``train.policy.adamw``), timed.

Prints one JSON object: each part's count, measured time and floor; the step's floor (training passes at
the product rate, decoding at the read rate, the optimiser as measured); and with ``--trl-s-per-step`` (TRL's
step on this machine, from trainer_vs_trl in the same session) the seconds a 2x goal leaves and that
floor's share of them. Torch runs on every core, glibc's malloc tuned as the trainer tunes it.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def best_of(repeats: int, work: Callable[[], Any]) -> float:
    work()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - began)
    return best


def training_pass(model: Any, args: argparse.Namespace, repeats: int) -> dict[str, float]:
    """One micro-batch's forward and backward as the trainer runs them: operations and seconds."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from train.forward import forward_logprobs
    from train.types import TrainBatch

    b, p, c = args.micro_batch, args.prompt_tokens, args.tokens
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (b, p + c), generator=generator)
    loss_mask = torch.zeros(b, p + c)
    loss_mask[:, p:] = 1
    batch = TrainBatch(
        input_ids_BT=ids,
        attention_mask_BT=torch.ones_like(ids),
        loss_mask_BT=loss_mask,
        inference_logprobs_BT=torch.zeros(b, p + c),
        advantages_BT=torch.ones(b, p + c),
    )

    def forward_backward() -> None:
        logprobs_BT, _ = forward_logprobs(model, batch, 1.0)
        (logprobs_BT * loss_mask).sum().backward()
        model.zero_grad(set_to_none=True)

    counter = FlopCounterMode(display=False)
    with counter:
        forward_backward()
    return {"flop": float(counter.get_total_flops()), "s": best_of(repeats, forward_backward)}


def product_rate(rows: int, hidden: int, intermediate: int, repeats: int) -> dict[str, float]:
    """GFLOP/s of a float32 matrix product at the layers' shape and at a 2048 cube."""
    import torch

    rates = {}
    for name, (m, k, n) in {
        "layer_shape": (rows, hidden, intermediate),
        "cube_2048": (2048, 2048, 2048),
    }.items():
        product = functools.partial(torch.mm, torch.randn(m, k), torch.randn(k, n))
        rates[name] = 2 * m * k * n / best_of(repeats, product) / 1e9
    return rates


def read_rates(model: Any, rows: int, repeats: int) -> tuple[dict[str, float], int]:
    """GB/s: streaming a 512 MiB tensor, and oneDNN's product over the model's reordered linear weights at
    ``rows`` rows (as ``packed_linears`` runs the decode); and the bytes of those weights, what each decode
    forward reads."""
    import torch

    stream = torch.ones(128 * 2**20)  # 512 MiB of float32, beyond any cache
    stream_gbs = stream.numel() * 4 / best_of(repeats, stream.sum) / 1e9
    del stream
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    packed = [(torch.ops.mkldnn._reorder_linear_weight(m.weight.detach(), rows), m.weight) for m in linears]
    inputs = [torch.randn(rows, w.shape[1]) for _, w in packed]

    def products() -> None:
        for (weight, _), x in zip(packed, inputs, strict=True):
            torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")

    nbytes = sum(w.numel() * w.element_size() for _, w in packed)
    return {"stream": stream_gbs, "packed_product": nbytes / best_of(repeats, products) / 1e9}, nbytes


def optimiser_seconds(model: Any, repeats: int) -> float:
    """Best time of clipping and one fused AdamW step (``train.policy.adamw``) over ``model``'s weights."""
    import torch

    from train.policy import adamw

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = adamw(params, 1e-6, (0.9, 0.99), 0.0)
    for p in params:
        p.grad = torch.zeros_like(p)

    def optimiser_step() -> None:
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()

    return best_of(repeats, optimiser_step)


def _parser() -> argparse.ArgumentParser:

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2", help="smollm2, or a local model folder")
    parser.add_argument("--rows", type=int, default=8, help="replies a step (prompts x group size)")
    parser.add_argument("--prompt-tokens", type=int, default=35)
    parser.add_argument("--tokens", type=int, default=96, help="completion tokens a reply")
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trl-s-per-step", type=float, default=0.0)
    return parser


def main() -> None:
    parser = _parser()
    args = parser.parse_args()
    if args.rows % args.micro_batch:
        parser.error("--rows must be a multiple of --micro-batch")

    import torch

    from envs.models import prepare_smollm2
    from envs.models.loading import load_causal_lm
    from train.config import TrainConfig
    from train.distributed import tune_host_allocator

    tune_host_allocator(TrainConfig())  # as the trainer runs
    folder = prepare_smollm2() if args.model == "smollm2" else Path(args.model)
    model = load_causal_lm(folder, dtype=torch.float32, attn_implementation="sdpa")
    micro_batches = args.rows // args.micro_batch
    config = model.config
    train = training_pass(model.train(), args, args.repeats)
    rates = product_rate(
        args.micro_batch * (args.prompt_tokens + args.tokens),
        config.hidden_size,
        config.intermediate_size,
        args.repeats,
    )
    best_rate = max(rates.values())
    reads, weight_bytes = read_rates(model, args.rows, args.repeats)
    optimiser_s = optimiser_seconds(model, args.repeats)
    train_flop = train["flop"] * micro_batches
    decode_bytes = weight_bytes * args.tokens
    floor = {
        "training_passes_s": train_flop / best_rate / 1e9,
        "decoding_at_stream_rate_s": decode_bytes / reads["stream"] / 1e9,
        "decoding_at_packed_product_rate_s": decode_bytes / reads["packed_product"] / 1e9,
        "optimiser_s": optimiser_s,
    }
    step_floor = floor["training_passes_s"] + floor["decoding_at_stream_rate_s"] + optimiser_s
    report: dict[str, Any] = {
        "model": str(folder),
        "threads": torch.get_num_threads(),
        "shape": {k: getattr(args, k) for k in ("rows", "prompt_tokens", "tokens", "micro_batch")},
        "training_passes": {
            "gflop_per_step": round(train_flop / 1e9, 1),
            "measured_s_per_step": round(train["s"] * micro_batches, 3),
            "achieved_gflop_per_s": round(train["flop"] / train["s"] / 1e9, 1),
            "product_gflop_per_s": {k: round(v, 1) for k, v in rates.items()},
            "share_of_best_product_rate": round(train["flop"] / train["s"] / 1e9 / best_rate, 3),
        },
        "decoding": {
            "weight_mb_per_forward": round(weight_bytes / 1e6, 1),
            "forwards_per_step": args.tokens,
            "read_gb_per_s": {k: round(v, 2) for k, v in reads.items()},
        },
        "floor_s": {k: round(v, 3) for k, v in floor.items()},
        "step_floor_s": round(step_floor, 3),
    }
    if args.trl_s_per_step:
        budget = args.trl_s_per_step / 2
        report["goal_2x"] = {
            "trl_s_per_step": args.trl_s_per_step,
            "budget_s": round(budget, 3),
            "step_floor_share_of_budget": round(step_floor / budget, 3),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
