"""``sdpa_float32``: float32 attention where a CPU trains under bf16 autocast, plain SDPA everywhere else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: E402

from envs.models import attention  # noqa: E402
from envs.models.loading import load_causal_lm  # noqa: E402


def qkv(requires_grad: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inputs of the tiny model's attention (2 query heads, 1 key/value head of 32): the query and key in
    float32 (after the rotary embedding), the value in bf16, as autocast leaves them."""
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, 2, 7, 32, generator=generator)
    k = torch.randn(2, 1, 7, 32, generator=generator)
    v = torch.randn(2, 1, 7, 32, generator=generator).bfloat16()
    return q.requires_grad_(requires_grad), k.requires_grad_(requires_grad), v.requires_grad_(requires_grad)


def test_under_autocast_with_gradients_the_attention_runs_in_float32(tiny_model_dir: Path) -> None:
    model = load_causal_lm(tiny_model_dir, dtype=torch.float32, attn_implementation=attention.NAME)
    module = model.model.layers[0].self_attn
    q, k, v = qkv(requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, _ = attention.float32_sdpa(module, q, k, v, None, scaling=0.25)
        plain, _ = sdpa_attention_forward(module, q, k, v, None, scaling=0.25)
    want, _ = sdpa_attention_forward(module, q, k, v.float(), None, scaling=0.25)  # no autocast: float32
    assert plain.dtype == torch.bfloat16  # what sdpa gives under autocast
    assert got.dtype == torch.float32 and torch.equal(got, want)
    got.sum().backward()
    assert v.grad is not None and v.grad.dtype == torch.bfloat16


def test_without_gradients_or_autocast_it_is_plain_sdpa(tiny_model_dir: Path) -> None:
    model = load_causal_lm(tiny_model_dir, dtype=torch.float32, attn_implementation=attention.NAME)
    module = model.model.layers[0].self_attn
    q, k, v = qkv(requires_grad=False)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():  # sampling under autocast
        got, _ = attention.float32_sdpa(module, q, k, v, None, scaling=0.25)
        want, _ = sdpa_attention_forward(module, q, k, v, None, scaling=0.25)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    q, k, v = qkv(requires_grad=True)
    v = v.float()  # float32 training: no autocast
    got, _ = attention.float32_sdpa(module, q, k, v, None, scaling=0.25)
    want, _ = sdpa_attention_forward(module, q, k, v, None, scaling=0.25)
    assert torch.equal(got, want)


def test_a_model_with_it_trains_as_sdpa_does_and_saves_a_plain_config(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Whole-model logits equal SDPA's in float32, differ from bf16 attention by rounding under autocast,
    and the saved config does not name the project's attention (other loaders, vLLM, never see it)."""
    ours = load_causal_lm(tiny_model_dir, dtype=torch.float32, attn_implementation=attention.NAME)
    sdpa = load_causal_lm(tiny_model_dir, dtype=torch.float32, attn_implementation="sdpa")
    ids = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    assert torch.equal(
        ours(input_ids=ids, attention_mask=mask).logits, sdpa(input_ids=ids, attention_mask=mask).logits
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = ours(input_ids=ids, attention_mask=mask).logits
        want = sdpa(input_ids=ids, attention_mask=mask).logits
    assert torch.allclose(got.float(), want.float(), atol=0.1)
    got.float().sum().backward()
    assert all(p.grad is not None for p in ours.parameters() if p.requires_grad)
    ours.save_pretrained(tmp_path)
    assert attention.NAME not in json.dumps(json.loads((tmp_path / "config.json").read_text()))
