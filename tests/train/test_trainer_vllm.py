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
    # every weight goes: the same tensors as the model's own file (the tied head once), headers aside
    full = (tiny_model_dir / "model.safetensors").stat().st_size
    assert all(abs(r["sync/bytes"] - full) < 8192 and r["sync/load_s"] > 0 for r in steps)
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


@pytest.mark.vllm
@pytest.mark.slow
def test_lora_training_through_vllm_sends_the_adapter_alone(
    lora_vllm_server: VllmServer, tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    from train.backend_kinds import KINDS

    server = lora_vllm_server
    monkeypatch.chdir(ROOT)
    overrides = [
        "max_steps=2",
        "env.eval_fraction=0",
        "model.lora={}",  # r = 16 on every linear layer
        "rollout.backend=vllm",
        f"rollout.vllm_urls=[{server.base_url}]",
        "rollout.check_sync=true",  # after each adapter sync the trainer compares greedy tokens, raising if apart
    ]
    with pytest.raises(ValueError, match=r"model\.lora\.r: rank 32 is above the --max-lora-rank 16"):
        KINDS["vllm"].check_before_load(
            run_config(
                "tiny_test.yaml", tiny_model_dir, tmp_path / "no", *overrides[:-1], "model.lora={r: 32}"
            )
        )
    train(run_config("tiny_test.yaml", tiny_model_dir, tmp_path / "run", *overrides))
    steps = [r for r in metrics(tmp_path / "run") if "time/sync_s" in r]
    # r = 16, hidden 64, head dim 32 with 1 KV head (k, v: 32 out), MLP 384; per layer A [16, in] + B [out, 16]:
    # q, o: 2048; k, v: 16*64 + 32*16 = 1536; gate, up, down: 16*64 + 384*16 = 7168; 28672 a layer, 57344 in all:
    # 229376 bytes in float32, beside the model's own file of about a megabyte
    assert len(steps) == 2
    assert all(229376 < r["sync/bytes"] < 229376 + 8192 and r["sync/load_s"] > 0 for r in steps)
    assert all(r["sync/bytes"] < (tiny_model_dir / "model.safetensors").stat().st_size / 3 for r in steps)
    # the rollouts' logprobs came from the server's adapted model and agree with the trainer's peft forward
    assert all(abs(r["train/is/ratio_mean"] - 1.0) < 0.05 for r in steps)
    listed = httpx.get(f"{server.base_url}/v1/models", timeout=10).json()["data"]
    assert [m["id"] for m in listed] == [str(tiny_model_dir)]  # the run unloaded its adapter at the end
