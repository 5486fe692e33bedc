"""Greedy tokens two ways, for tests that check a server follows a policy: the policy's own (transformers,
one token at a time) and a vLLM server's (``/v1/completions`` on token ids, every token, EOS or not)."""

from __future__ import annotations

from typing import Any

import httpx


def policy_greedy(model: Any, prompt: list[int], max_tokens: int) -> list[int]:
    """``max_tokens`` greedy tokens of a transformers causal LM after ``prompt``."""
    import torch

    ids, out = list(prompt), []
    with torch.no_grad():
        for _ in range(max_tokens):
            nxt = int(model(torch.tensor([ids])).logits[0, -1].argmax())
            out.append(nxt)
            ids.append(nxt)
    return out


def server_greedy(base_url: str, model_name: str, prompt: list[int], max_tokens: int) -> list[int]:
    """``max_tokens`` greedy tokens of the server at ``base_url`` (``ignore_eos``: all of them compared)."""
    body = {
        "model": model_name,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "return_token_ids": True,
    }
    resp = httpx.post(f"{base_url}/v1/completions", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    return list(resp.json()["choices"][0]["token_ids"])
