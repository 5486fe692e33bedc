"""The GPU path (marked ``gpu``): these run where CUDA is available and are skipped elsewhere.

``scripts/gpu_check.sh`` runs them with the GPU benchmark. ``RUBRIC_GRPO_GPU_TESTS_ON_CPU=1`` runs them on the
CPU instead (with float32 where bf16 would be asked for), to check the tests themselves on a machine
without a GPU; it proves nothing about a GPU."""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tests.train.runs import ROOT, metrics, run_config  # noqa: E402

ON_CPU = os.environ.get("RUBRIC_GRPO_GPU_TESTS_ON_CPU") == "1"
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (torch.cuda.is_available() or ON_CPU), reason="needs a CUDA device"),
]
DEVICE = "cpu" if ON_CPU else "cuda"
PRECISION = "no" if ON_CPU else "bf16"


def _launch(
    out: Path, model_dir: Path, *overrides: str, config: str = "single_process.yaml"
) -> list[dict[str, Any]]:
    """``accelerate launch`` of the tiny config; returns its metrics."""
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        config if Path(config).is_absolute() else f"configs/accelerate/{config}",
        "--mixed_precision",
        PRECISION,
        *(["--cpu"] if ON_CPU and config == "single_process.yaml" else []),
        "-m",
        "train",
        "configs/train/tiny_test.yaml",
        f"model.name_or_path={model_dir}",
        f"logging.output_dir={out}",
        "logging.wandb_mode=disabled",
        *overrides,
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return metrics(out)


def _weights_moved(model_dir: Path, run: Path, step: int) -> float:
    from safetensors.torch import load_file

    before = load_file(str(model_dir / "model.safetensors"))
    after = load_file(str(run / "checkpoints" / f"step_{step:06d}" / "model" / "model.safetensors"))
    return max(
        (after[k].float() - before[k].float()).abs().max().item() for k in before.keys() & after.keys()
    )


def test_one_training_step_bf16_autocast_over_fp32_master_weights(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from train.trainer import train

    cfg = run_config(
        "tiny_test.yaml",
        tiny_model_dir,
        tmp_path / "run",
        "max_steps=1",
        "model.dtype=float32",
        f"model.mixed_precision={'no' if ON_CPU else 'bf16'}",
        "logging.wandb_mode=disabled",
        "env.eval_fraction=0",
    )
    train(cfg)
    (step,) = [r for r in metrics(tmp_path / "run") if "train/loss" in r]
    assert math.isfinite(step["train/loss"]) and step["train/grad_norm"] > 0
    assert _weights_moved(tiny_model_dir, tmp_path / "run", 1) > 0
    exported = json.loads(
        (tmp_path / "run" / "checkpoints" / "step_000001" / "model" / "config.json").read_text()
    )
    assert exported.get("dtype", exported.get("torch_dtype")) == "float32"  # the master weights stay fp32


def test_local_generation_logprobs_match_the_trainers(tiny_model_dir: Path) -> None:
    """The local backend's logprobs of its sampled tokens equal a training forward's for the same tokens,
    within bf16 tolerance (the sampling copy is bf16 on a GPU; the trainer's pass is fp32 under autocast)."""
    from envs.backends.base import SamplingParams
    from envs.backends.local import LocalBackend
    from envs.models.loading import load_causal_lm

    policy = load_causal_lm(tiny_model_dir, dtype=torch.float32).to(DEVICE).eval()
    backend = LocalBackend(policy, _tokenizer(tiny_model_dir), sampling_dtype=None if ON_CPU else "bfloat16")
    prompt = [5, 6, 7, 8, 9]

    async def sample() -> Any:
        try:
            return await backend.generate(
                prompt, SamplingParams(n=4, max_tokens=16, min_tokens=16, temperature=1.0)
            )
        finally:
            await backend.close()

    for s in asyncio.run(sample()):
        ids = torch.tensor([prompt + s.completion_ids], device=DEVICE)
        with torch.no_grad(), torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=not ON_CPU):
            logits = policy(input_ids=ids).logits.float()[0, len(prompt) - 1 : -1]
        trainer = torch.log_softmax(logits, -1).gather(1, ids[0, len(prompt) :, None])[:, 0].cpu()
        assert torch.allclose(trainer, torch.tensor(s.logprobs), atol=0.1 if not ON_CPU else 1e-4)


def _tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def test_three_steps_under_accelerate_launch_then_resume(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    rows = _launch(out, tiny_model_dir, "max_steps=3", "logging.checkpoint_every=2")
    assert [r["step"] for r in rows if "train/loss" in r] == [1, 2, 3]
    assert all(math.isfinite(r["train/loss"]) for r in rows if "train/loss" in r)
    assert _weights_moved(tiny_model_dir, out, 3) > 0
    # resume: drop the last checkpoint and go on from step 2 to 4
    shutil.rmtree(out / "checkpoints" / "step_000003")
    (out / "checkpoints" / "latest").write_text("step_000002")
    rows = _launch(out, tiny_model_dir, "max_steps=4", "logging.checkpoint_every=2")
    assert [r["step"] for r in rows if "train/loss" in r][-2:] == [3, 4]
    assert json.loads((out / "checkpoints" / "step_000004" / "trainer_state.json").read_text())["step"] == 4


def test_two_steps_under_deepspeed_zero2(tiny_model_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    if ON_CPU:
        pytest.skip("ZeRO-2 on the CPU is tests/train/test_distributed.py's")
    config = tmp_path / "zero2_one_gpu.yaml"
    text = (
        (ROOT / "configs/accelerate/deepspeed_zero2.yaml")
        .read_text()
        .replace("num_processes: 2", "num_processes: 1")
    )
    config.write_text(text)
    rows = _launch(tmp_path / "run", tiny_model_dir, "max_steps=2", config=str(config.resolve()))
    assert [r["step"] for r in rows if "train/loss" in r] == [1, 2]
    assert all(math.isfinite(r["train/loss"]) for r in rows if "train/loss" in r)
