"""The tiny random test model: builds fast, loads in transformers, generates, templates, is deterministic."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer

from envs.models.tiny import IM_END, IM_START, build_tiny_model

MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is 12 plus 30?"},
]


def test_config_fits_vllm_cpu(tiny_model_dir: Path) -> None:
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["model_type"] == "qwen2"
    assert config["hidden_size"] // config["num_attention_heads"] == 32  # vLLM CPU attention needs >= 32
    assert config["head_dim"] == 32
    assert (tiny_model_dir / "model.safetensors").is_file()


def test_loads_and_generates_greedily(tiny_model_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    n_params = sum(p.numel() for p in model.parameters())
    assert 100_000 < n_params < 1_000_000
    assert model.config.vocab_size == len(tok)  # every id the model emits decodes

    ids = torch.tensor([tok.encode("The answer is")])
    with torch.no_grad():
        a = model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
        b = model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert a.shape == (1, ids.shape[1] + 8)
    assert torch.equal(a, b)
    assert isinstance(tok.decode(a[0, ids.shape[1] :]), str)


def test_tokenizer_special_tokens_and_chat_template(tiny_model_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert 300 <= len(tok) <= 1100
    for special in (IM_START, IM_END, "<|endoftext|>"):
        assert len(tok.encode(special, add_special_tokens=False)) == 1
    assert tok.eos_token == IM_END
    assert tok.pad_token == "<|endoftext|>"

    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is 12 plus 30?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    enc: Any = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, return_dict=True)
    ids: list[int] = list(enc["input_ids"])
    assert ids == tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text


def test_every_loader_tokenizes_alike(tiny_model_dir: Path) -> None:
    """AutoTokenizer resolves qwen2 to Qwen2Tokenizer; it must agree with the saved tokenizer.json."""
    raw = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    for text in ["Hello world!  two  spaces\n\nnew", "What's 12+30? 3.14 ünï 日本 😀", " lead", "I'll\t x"]:
        ids = raw.encode(text).ids
        assert tok.encode(text, add_special_tokens=False) == ids
        assert tok.decode(ids) == text


def test_deterministic_for_a_seed(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    a = build_tiny_model(tmp_path / "a", seed=0)
    elapsed = time.perf_counter() - t0
    b = build_tiny_model(tmp_path / "b", seed=0)
    c = build_tiny_model(tmp_path / "c", seed=1)
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_bytes() == (c / "tokenizer.json").read_bytes()
    assert elapsed < 30  # about a second once transformers is imported


def test_seed_does_not_touch_global_rng(tmp_path: Path) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model(tmp_path / "m", seed=7)
    assert torch.equal(torch.rand(3), expected)
