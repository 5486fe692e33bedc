"""Weight updates without a restart: push new weights, and the server's greedy tokens equal transformers'."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

import httpx
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from envs.serving.server import VllmServer, find_free_port
from envs.serving.weights import WeightSyncError, push_weights, save_state_dict
from tests.support.greedy import policy_greedy, server_greedy

PROMPT = "<|im_start|>user\nWhat is 7 times 8?<|im_end|>\n<|im_start|>assistant\n"
MAX_TOKENS = 12


def _model(model_dir: Path) -> Any:
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def _noisy_state_dict(model_dir: Path, seed: int, std: float = 0.05) -> tuple[Any, dict[str, torch.Tensor]]:
    """The tiny model with Gaussian noise added to every weight (fixed seed), and its state dict."""
    model = _model(model_dir)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():  # tied: the embedding (and so the head) is changed once
            p.add_(torch.randn(p.shape, generator=gen) * std)
    return model, model.state_dict()


def _rpc(server: VllmServer, method: str, **kwargs: str) -> dict[str, Any]:
    resp = httpx.post(
        f"{server.base_url}/collective_rpc", json={"method": method, "kwargs": kwargs}, timeout=60
    )
    assert resp.status_code == 200, resp.text
    [result] = resp.json()["results"]
    assert isinstance(result, dict), result
    return result


# ---------------------------------------------------------------- without a server


def test_save_state_dict_stores_tied_tensors_once(tmp_path: Path, tiny_model_dir: Path) -> None:
    model = _model(tiny_model_dir)
    state = model.state_dict()
    assert "lm_head.weight" in state  # tied: the same storage as the embedding
    path = save_state_dict(state, tmp_path / "w.safetensors")
    saved = load_file(str(path))
    assert "lm_head.weight" not in saved
    assert set(saved) == set(state) - {"lm_head.weight"}
    assert torch.equal(saved["model.embed_tokens.weight"], state["model.embed_tokens.weight"])


async def test_unreachable_server_raises_weight_sync_error(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{find_free_port()}"
    path = save_state_dict({"w": torch.zeros(2)}, tmp_path / "w.safetensors")
    with pytest.raises(WeightSyncError, match=url) as info:
        await push_weights([url], path, timeout_s=5)
    assert "pause" in str(info.value)


# ---------------------------------------------------------------- a real server


@pytest.mark.vllm
@pytest.mark.slow
def test_pushed_weights_give_transformers_greedy_tokens(
    restore_weights: VllmServer, tiny_model_dir: Path, tmp_path: Path
) -> None:
    server = restore_weights
    name = str(tiny_model_dir)
    prompt = list(AutoTokenizer.from_pretrained(tiny_model_dir).encode(PROMPT, add_special_tokens=False))
    before = server_greedy(server.base_url, name, prompt, MAX_TOKENS)
    assert before == policy_greedy(_model(tiny_model_dir), prompt, MAX_TOKENS)

    model, state = _noisy_state_dict(tiny_model_dir, seed=1)
    want = policy_greedy(model, prompt, MAX_TOKENS)
    assert want != before  # the noise changes the greedy path
    t0 = time.monotonic()
    result = asyncio.run(push_weights([server.base_url], state, timeout_s=60, weight_version="step-1"))
    elapsed = time.monotonic() - t0
    assert server_greedy(server.base_url, name, prompt, MAX_TOKENS) == want
    assert result.reload_seconds[server.base_url] > 0 and result.save_seconds > 0
    assert elapsed < 30
    info = httpx.get(f"{server.base_url}/weight_info", timeout=10).json()
    assert info["weight_version"] == "step-1"
    assert not Path(result.path).exists()  # the temporary file is gone

    # A second push (a file path this time) moves it again.
    model2, state2 = _noisy_state_dict(tiny_model_dir, seed=2)
    asyncio.run(push_weights(server.base_url, save_state_dict(state2, tmp_path / "w2.safetensors"), 60))
    assert server_greedy(server.base_url, name, prompt, MAX_TOKENS) == policy_greedy(
        model2, prompt, MAX_TOKENS
    )


@pytest.mark.vllm
@pytest.mark.slow
def test_tied_output_head_follows_the_update(
    restore_weights: VllmServer, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """vLLM's plain reload leaves a tied head on the old weights; the extension re-ties and repacks it."""
    server = restore_weights
    assert _rpc(server, "rg_weight_checksums")["head_matches_embedding"] is True
    _, state = _noisy_state_dict(tiny_model_dir, seed=3)
    path = save_state_dict(state, tmp_path / "w.safetensors")

    stale = _rpc(server, "rg_reload_weights", path=str(path), retie="false")
    assert stale["retied"] is False
    sums = _rpc(server, "rg_weight_checksums")
    assert sums["head_matches_embedding"] is False  # the head still computes the old logits
    assert sums["embed_sum"] == pytest.approx(float(state["model.embed_tokens.weight"].sum()), rel=1e-5)

    asyncio.run(push_weights(server.base_url, path, timeout_s=60))
    sums = _rpc(server, "rg_weight_checksums")
    assert sums["head_matches_embedding"] is True
    assert sums["head_weight_sum"] == pytest.approx(float(state["model.embed_tokens.weight"].sum()), rel=1e-5)
