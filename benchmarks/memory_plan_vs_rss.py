"""The memory plan's estimate of a training step against the RSS the step adds, under settings side by side.

A random 4-layer Qwen2 (width 256, MLP 1024, vocabulary 16384; the tiny model's tokenizer) is built in a
temporary folder; each setting runs in its own process (peak RSS is per process; glibc's mmap threshold is
fixed there, ``FIXED_MMAP_THRESHOLD``): the policy loaded as the trainer loads it, then one ``train_step`` of
4 sequences of ``--tokens`` tokens in one micro-batch. The measured figure is the peak RSS less the RSS before
the step; the planned one is the plan's training-step part plus the AdamW moments (allocated at the first
step). On a CUDA host the step runs on the GPU and the measured figure is ``torch.cuda.max_memory_allocated``
less the memory allocated before the step. Prints one JSON object.

    .venv/bin/python benchmarks/memory_plan_vs_rss.py
    .venv/bin/python benchmarks/memory_plan_vs_rss.py --settings "" "model.lora={}" --tokens 512
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_SETTINGS = (
    "",
    "model.gradient_checkpointing=true",
    "model.lora={}",
    "model.mixed_precision=bf16",
    # the settings of configs/train/first_responder_gpu_lora_7b.yaml
    "model.dtype=bfloat16 model.lora={} model.gradient_checkpointing=true model.mixed_precision=bf16",
)
SEQUENCES = 4
FIXED_MMAP_THRESHOLD = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}
"""Each setting's process gets glibc's mmap threshold fixed at 128 KiB. By default glibc raises it each time a
large block is freed (up to 32 MiB), and later tensors under it come from the heap, which keeps freed memory
resident: the RSS then measured the allocator's retention too, and varied by up to a fifth of a step from run
to run. With the threshold fixed, a tensor over 128 KiB is mapped and unmapped with its life, and the same
setting measures the same bytes every run."""


def build_model(out: Path) -> Path:
    """The 4-layer Qwen2 of the module docstring, random weights, saved in ``out``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from envs.models import build_tiny_model

    build_tiny_model(out)  # the tokenizer; the model is replaced
    config = AutoConfig.for_model(
        "qwen2",
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=1024,
        vocab_size=16384,
        tie_word_embeddings=True,
        max_position_embeddings=2048,
    )
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    return out


def _rss_gib() -> float:
    """This process's resident memory now (Linux)."""
    status = Path("/proc/self/status").read_text().splitlines()
    return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 2**20


def one_step(folder: str, overrides: list[str], tokens: int) -> dict[str, object]:
    """Plan, load and run one step of ``overrides`` on the model in ``folder``; the memory it added."""
    import torch
    from accelerate import Accelerator

    from rubrics.types import TokenSequence
    from train.backend_kinds import GIB
    from train.batching import collate
    from train.config_files import load_config
    from train.distributed import peak_rss_gib, resolve_mixed_precision, tune_host_allocator
    from train.memory_check import make_setup
    from train.memory_plan import estimate, read_shapes
    from train.policy import load_policy
    from train.step import train_step

    fixed = [
        f"model.name_or_path={folder}",
        f"env.max_total_tokens={tokens}",
        f"optim.micro_batch_size={SEQUENCES}",
    ]
    # glibc then returns freed blocks over its mapping threshold: RSS follows the live tensors
    fixed.append("reuse_freed_host_memory=false")
    cfg = load_config(ROOT / "configs/train/tiny_test.yaml", [*fixed, *overrides])
    cuda = torch.cuda.is_available()  # on a GPU the measure is torch's peak of allocated memory instead
    if not cuda:
        tune_host_allocator(cfg)
    accelerator = Accelerator(
        cpu=not cuda, mixed_precision=resolve_mixed_precision(cfg.model.mixed_precision)
    )
    plan = estimate(cfg, read_shapes(Path(folder) / "config.json"), make_setup(cfg))
    policy = load_policy(cfg, accelerator)
    generator = torch.Generator().manual_seed(0)
    seqs = [
        TokenSequence(
            ids=torch.randint(0, 16000, (tokens,), generator=generator).tolist(),
            loss_mask=[0] + [1] * (tokens - 1),
            logprobs=[-2.0] * tokens,
        )
        for _ in range(SEQUENCES)
    ]
    batch = collate(seqs, [1.0, -1.0] * (SEQUENCES // 2), [False] * SEQUENCES, pad_token_id=0)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated() / GIB if cuda else _rss_gib()
    train_step(policy.model, policy.ref_model, batch, cfg, accelerator, policy.optimizer, policy.scheduler)
    measured = (torch.cuda.max_memory_allocated() / GIB if cuda else peak_rss_gib()) - before
    moments = next(r.bytes for r in plan.rows if r.name == "optimizer state")
    planned = (plan.part("step") + moments) / GIB
    return {
        "measure": "cuda_max_allocated" if cuda else "rss",
        "measured_gib": round(measured, 3),
        "planned_gib": round(planned, 3),
        "ratio": round(measured / planned, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--settings", nargs="*", default=list(DEFAULT_SETTINGS), help="space-separated overrides"
    )
    parser.add_argument("--tokens", type=int, default=1024, help="tokens a sequence (default %(default)s)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        folder, setting = args.child
        print(json.dumps(one_step(folder, setting.split(), args.tokens)))
        return
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **FIXED_MMAP_THRESHOLD}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_model(Path(tmp) / "model")
        for setting in args.settings:
            cmd = [sys.executable, __file__, "--child", str(folder), setting, "--tokens", str(args.tokens)]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=True)
            results[setting or "full weights"] = json.loads(out.stdout.strip().splitlines()[-1])
    shape = {"sequences": SEQUENCES, "tokens": args.tokens}
    print(
        json.dumps(
            {"machine": platform.processor() or platform.machine(), "batch": shape, "settings": results}
        )
    )


if __name__ == "__main__":
    main()
