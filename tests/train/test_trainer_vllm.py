"""The trainer against a real vLLM server: rollouts over HTTP, weights pushed after every step and checked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

pytest.importorskip("transformers")

from envs.backends.base import SamplingParams, plain_generate_kwargs
from envs.backends.vllm import VllmBackend
from envs.serving.server import VllmServer
from tests.train.runs import metrics, run_config
from train.trainer import train

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.vllm
@pytest.mark.slow
def test_training_through_vllm_pushes_every_step(
    restore_weights: VllmServer, tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    server = restore_weights
    monkeypatch.chdir(ROOT)
    cfg = run_config(
        "tiny_test.yaml",
        tiny_model_dir,
        tmp_path / "run",
        "max_steps=2",
        "env.eval_fraction=0",
        "rollout.backend=vllm",
        f"rollout.vllm_urls=[{server.base_url}]",
        "rollout.check_sync=true",  # after each push the trainer compares greedy tokens, raising if apart
    )
    train(cfg)
    rows = metrics(tmp_path / "run")
    steps = [r for r in rows if "time/sync_s" in r]
    assert len(steps) == 2 and all(r["time/sync_s"] > 0 and r["train/loss_tokens"] > 0 for r in steps)
    # the rollouts' logprobs came from the server and agree with the trainer's (float32 on both sides)
    assert all(abs(r["train/is/ratio_mean"] - 1.0) < 0.05 for r in steps)
    info = httpx.get(f"{server.base_url}/weight_info", timeout=10).json()
    assert info["weight_version"] == "step-2"

    # independently: the server now answers as the trained model saved at the end does
    trained = AutoModelForCausalLM.from_pretrained(next((tmp_path / "run").glob("checkpoints/*/model")))
    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    backend = VllmBackend([server.base_url], str(tiny_model_dir))
    (served,) = asyncio.run(backend.generate(prompt, SamplingParams(n=1, temperature=0.0, max_tokens=6)))
    with torch.no_grad():
        # the model file's own defaults (repetition_penalty, top_k) off, as the server ignores them too
        ids = torch.tensor([prompt])
        local = trained.generate(ids, max_new_tokens=6, do_sample=False, **plain_generate_kwargs())[
            0, 8:
        ].tolist()
    assert served.completion_ids == local[: len(served.completion_ids)]
