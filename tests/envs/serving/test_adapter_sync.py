"""LoRA adapter-only sync: after each step only the adapter goes to the server, requests name it, the previous
one is unloaded, and the server's greedy tokens equal the adapted policy's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

import httpx
import torch
from safetensors.torch import load_file

from envs.backends.base import OneProcessWeights, SamplingParams
from envs.backends.vllm import VllmBackend
from envs.serving.adapters import check_lora_server, lora_server_args, max_lora_rank, write_adapter
from envs.serving.server import VllmServer, find_free_port
from tests.support.greedy import policy_greedy

LINEARS = ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]
PROMPT = "<|im_start|>user\nWhat is 7 times 8?<|im_end|>\n<|im_start|>assistant\n"
TOKENS = 10
vllm_slow = [pytest.mark.vllm, pytest.mark.slow]


def _adapted(model_dir: Path, r: int, seed: int) -> Any:
    """The tiny model with a LoRA adapter on every linear layer, its B drawn at random (seeded) so that the
    adapted greedy path differs from the base model's (a fresh adapter, B = 0, would change nothing)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = get_peft_model(
        base, LoraConfig(r=r, lora_alpha=2 * r, target_modules=LINEARS, task_type="CAUSAL_LM")
    )
    _redraw(model, seed)
    return model.eval()


def _redraw(model: Any, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)


async def _served(backend: VllmBackend, prompt: list[int]) -> tuple[list[int], str]:
    """The server's greedy tokens (the backend's request) and the model that answered."""
    params = SamplingParams(n=1, temperature=0.0, max_tokens=TOKENS)
    (sample,) = await backend.generate(prompt, params)
    return sample.completion_ids, str(sample.meta["model"])


def _listed(server: VllmServer) -> list[str]:
    return [m["id"] for m in httpx.get(f"{server.base_url}/v1/models", timeout=10).json()["data"]]


# ---------------------------------------------------------------- without a server


def test_max_lora_rank_is_the_smallest_vllm_accepts() -> None:
    assert [max_lora_rank(r) for r in (1, 2, 8, 16, 17, 320, 512)] == [1, 8, 8, 16, 32, 320, 512]
    with pytest.raises(ValueError, match="513"):
        max_lora_rank(513)
    assert lora_server_args(12) == ["--enable-lora", "--max-lora-rank", "16", "--max-loras", "2"]


def test_a_server_for_lora_gets_the_flags_and_the_environment(tiny_model_dir: Path) -> None:
    from envs.serving.launch import rl_server
    from train.cli import build_parser
    from train.commands import serve_options_after_model

    # serve's own options after MODEL are its own; vllm's flags come after --
    args = build_parser().parse_args(["serve", "smollm2", "--lora-rank", "12", "--", "--max-num-seqs", "8"])
    assert serve_options_after_model(args) == ["--max-num-seqs", "8"] and args.lora_rank == 12
    server = rl_server(tiny_model_dir, port=None, lora_rank=args.lora_rank)
    command = " ".join(server.command())
    assert "--enable-lora --max-lora-rank 16 --max-loras 2" in command
    assert server.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "1" and server.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert "--enable-lora" not in rl_server(tiny_model_dir, port=None).command()


def test_write_adapter_holds_the_adapter_alone(tiny_model_dir: Path, tmp_path: Path) -> None:
    model = _adapted(tiny_model_dir, r=4, seed=0)
    written = write_adapter(model, model.state_dict(), tmp_path / "a")
    saved = load_file(str(tmp_path / "a" / "adapter_model.safetensors"))
    config = json.loads((tmp_path / "a" / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8 and sorted(config["target_modules"]) == LINEARS
    # 2 layers x 7 linear layers x (A, B); peft's saved names, without the adapter's name
    assert len(saved) == 28
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in saved
    # r = 4, hidden 64, head dim 32 with 1 KV head (k, v: 32 out), MLP 384; per layer A [4, in] + B [out, 4]:
    # q, o: 4*64 + 64*4 = 512; k, v: 4*64 + 32*4 = 384; gate, up: 4*64 + 384*4 = 1792; down: 4*384 + 64*4 = 1792
    # = 512*2 + 384*2 + 1792*3 = 7168 per layer, 14336 in all, 57344 bytes in float32
    assert sum(t.numel() for t in saved.values()) == 14336
    assert all(t.dtype == torch.float32 for t in saved.values())
    assert 57344 < written < 57344 + 8192  # the tensors, the safetensors header and the config
    b = saved["base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"]
    assert torch.equal(b, model.base_model.model.model.layers[1].mlp.down_proj.lora_B["default"].weight)


def test_an_unreachable_server_is_named() -> None:
    url = f"http://127.0.0.1:{find_free_port()}"
    with pytest.raises(ValueError, match=f"{url} is unreachable"):
        check_lora_server(url, 8, timeout_s=5)


# ---------------------------------------------------------------- real servers


@pytest.mark.vllm
@pytest.mark.slow
def test_servers_without_lora_or_with_a_smaller_rank_are_refused_with_the_flag(
    lora_vllm_server: VllmServer, rl_vllm_server: VllmServer
) -> None:
    check_lora_server(lora_vllm_server.base_url, 16)  # served with --max-lora-rank 16
    with pytest.raises(ValueError, match=r"rank 32 is above the --max-lora-rank 16 .* --max-lora-rank 32"):
        check_lora_server(lora_vllm_server.base_url, 32)
    with pytest.raises(ValueError, match="serves no LoRA adapters: restart it with --enable-lora"):
        check_lora_server(rl_vllm_server.base_url, 16)


@pytest.mark.vllm
@pytest.mark.slow
async def test_only_the_adapter_goes_and_requests_name_it(
    lora_vllm_server: VllmServer, tiny_model_dir: Path
) -> None:
    from transformers import AutoTokenizer

    server = lora_vllm_server
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompt = list(tokenizer.encode(PROMPT, add_special_tokens=False))
    policy = _adapted(tiny_model_dir, r=8, seed=1)
    weights = OneProcessWeights(policy)
    backend = VllmBackend([server.base_url], str(tiny_model_dir))
    with policy.disable_adapter():
        base = policy_greedy(policy, prompt, TOKENS)
    adapted = policy_greedy(policy, prompt, TOKENS)
    assert adapted != base  # the check below can fail

    # before any sync: the base model, by its own name
    tokens, model = await _served(backend, prompt)
    assert model == str(tiny_model_dir) and tokens == base[: len(tokens)] and len(tokens) >= 3

    await backend.sync_weights(weights, step=1)
    first = backend.adapters.current
    assert first is not None and first.endswith("-step-1") and first in _listed(server)
    folder = backend.adapters.folder(first)
    assert folder is not None and folder.is_dir()
    tokens, model = await _served(backend, prompt)
    assert model == first and tokens == adapted[: len(tokens)] and len(tokens) >= 3
    await backend.check_sync(weights, tokenizer)
    stats = backend.sync_stats
    files = sum(f.stat().st_size for f in folder.iterdir() if f.name.startswith("adapter_"))
    assert stats["sync/bytes"] == files and stats["sync/load_s"] > 0
    full = (tiny_model_dir / "model.safetensors").stat().st_size
    assert stats["sync/bytes"] < full / 3  # r = 8 of a 64-wide model; the embedding is most of the model

    # the policy moves without a sync: the check sees it
    _redraw(policy, seed=2)
    moved = policy_greedy(policy, prompt, TOKENS)
    assert moved != adapted
    with pytest.raises(RuntimeError, match="weight sync check failed"):
        await backend.check_sync(weights, tokenizer)

    await backend.sync_weights(weights, step=2)
    second = backend.adapters.current
    assert second is not None and second.endswith("-step-2")
    listed = _listed(server)
    assert second in listed and first not in listed  # the previous adapter is unloaded
    assert not folder.exists()  # and its folder deleted
    tokens, model = await _served(backend, prompt)
    assert model == second and tokens == moved[: len(tokens)]
    await backend.check_sync(weights, tokenizer)

    # an adapter with a request in flight keeps its folder until a later sync finds it idle
    backend.adapters.in_flight[second] += 1
    await backend.sync_weights(weights, step=3)
    kept = backend.adapters.folder(second)
    assert kept is not None and kept.is_dir() and second not in _listed(server)
    backend.adapters.in_flight[second] -= 1
    await backend.sync_weights(weights, step=4)
    assert not kept.exists() and backend.adapters.folder(second) is None

    # closing unloads this client's adapter and deletes its folders
    last = backend.adapters.current
    last_folder = backend.adapters.folder(str(last))
    await backend.close()
    assert _listed(server) == [str(tiny_model_dir)]
    assert last_folder is not None and not last_folder.exists()


class _OtherProcess(OneProcessWeights):
    """The same policy as a process of the run that is not the main one sees it."""

    is_main = False


@pytest.mark.vllm
@pytest.mark.slow
async def test_every_process_names_the_adapter_and_a_leftover_name_is_replaced(
    lora_vllm_server: VllmServer, tiny_model_dir: Path
) -> None:
    from transformers import AutoTokenizer

    server = lora_vllm_server
    prompt = list(AutoTokenizer.from_pretrained(tiny_model_dir).encode(PROMPT, add_special_tokens=False))
    crashed_policy, policy = _adapted(tiny_model_dir, r=8, seed=3), _adapted(tiny_model_dir, r=8, seed=4)
    assert policy_greedy(crashed_policy, prompt, TOKENS) != policy_greedy(policy, prompt, TOKENS)
    # a run that stopped without closing left its step-1 adapter loaded; the resumed run (same prefix) reloads it
    crashed = VllmBackend([server.base_url], str(tiny_model_dir), adapter_prefix="policy-test")
    await crashed.sync_weights(OneProcessWeights(crashed_policy), step=1)
    main = VllmBackend([server.base_url], str(tiny_model_dir), adapter_prefix="policy-test")
    other = VllmBackend([server.base_url], str(tiny_model_dir), adapter_prefix="policy-test")
    await main.sync_weights(OneProcessWeights(policy), step=1)
    await other.sync_weights(_OtherProcess(policy), step=1)  # pushes nothing: names what the main one loaded
    assert other.sync_stats == {} and other.adapters.folder("policy-test-step-1") is None
    want = policy_greedy(policy, prompt, TOKENS)
    for backend in (main, other):
        tokens, model = await _served(backend, prompt)
        assert model == "policy-test-step-1" and tokens == want[: len(tokens)] and len(tokens) >= 3
    first_folder = main.adapters.folder("policy-test-step-1")
    await main.sync_weights(OneProcessWeights(policy), step=1)  # the same step again replaces its own adapter
    assert _listed(server).count("policy-test-step-1") == 1 and first_folder and not first_folder.exists()
    tokens, _ = await _served(main, prompt)
    assert tokens == want[: len(tokens)]
    await other.close()  # a process that did not load the adapter leaves it to the main one
    assert "policy-test-step-1" in _listed(server)
    await main.close()
    assert _listed(server) == [str(tiny_model_dir)]
    crashed.adapters.current = None  # its adapter is gone from the server already: only its folder is left
    await crashed.close()
