"""The local backend on the tiny model: logprobs equal a teacher-forced forward pass, shared prefill, logits
of the last position only, greedy determinism and batching of concurrent calls."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

pytest.importorskip("transformers")

import torch

from envs.backends import LocalBackend, SamplingParams
from envs.chat import chat_ids

from ..helpers import QUESTION

# -- local backend -----------------------------------------------------------------------------------


async def test_local_logprobs_equal_a_teacher_forced_forward_pass(local: LocalBackend) -> None:
    prompts = [
        chat_ids(local.tokenizer, QUESTION),
        chat_ids(local.tokenizer, [{"role": "user", "content": "Hi"}]),
    ]
    params = SamplingParams(n=3, temperature=0.7, max_tokens=12, seed=3)
    groups = await asyncio.gather(*(local.generate(p, params) for p in prompts))  # one batch, left-padded
    for prompt, samples in zip(prompts, groups, strict=True):
        assert len(samples) == 3
        for s in samples:
            assert len(s.completion_ids) == len(s.logprobs) >= 1
            ids = torch.tensor([prompt + s.completion_ids])
            with torch.no_grad():
                logits = local.model(ids).logits[0, len(prompt) - 1 : -1].float()
            expected = (
                torch.log_softmax(logits / 0.7, dim=-1).gather(1, ids[0, len(prompt) :, None]).squeeze(1)
            )
            assert torch.allclose(torch.tensor(s.logprobs), expected, atol=1e-4)
            if s.finish_reason == "stop":
                assert s.completion_ids[-1] in local.eos_token_ids
            else:
                assert len(s.completion_ids) == 12


async def test_shared_prefill_runs_once_per_distinct_prompt_and_changes_nothing(
    local: LocalBackend, monkeypatch
) -> None:
    prompts = [
        chat_ids(local.tokenizer, QUESTION),
        chat_ids(local.tokenizer, [{"role": "user", "content": "Hi"}]),
    ]
    params = SamplingParams(n=3, temperature=0.0, max_tokens=10)
    prefilled: list[int] = []
    original = local._shared_prefill

    def spy(rows: Any, input_ids: Any, attention_mask: Any) -> Any:
        cache = original(rows, input_ids, attention_mask)
        prefilled.append(0 if cache is None else len(rows))
        return cache

    monkeypatch.setattr(local, "_shared_prefill", spy)
    shared = await asyncio.gather(*(local.generate(p, params) for p in prompts))
    local.share_prefill = False
    try:
        plain = await asyncio.gather(*(local.generate(p, params) for p in prompts))
    finally:
        local.share_prefill = True
    assert prefilled == [6]  # one batch of 6 rows from 2 distinct prompts went through the shared cache
    for a, b in zip(itertools.chain(*shared), itertools.chain(*plain), strict=True):
        assert a.completion_ids == b.completion_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    unique = [await local.generate(p, SamplingParams(n=1, temperature=0.0, max_tokens=4)) for p in prompts]
    assert prefilled[1:] == [0, 0] and all(len(u) == 1 for u in unique)  # nothing shared: plain prefill


async def test_generation_computes_logits_of_the_last_position_only(local: LocalBackend) -> None:
    """No forward of a generation (the shared prefill included) builds logits for a whole prompt: for long
    multi-turn prompts such a [rows, width, vocab] block took gigabytes (the main job peaked at 9.6 GiB)."""
    head = local.model.get_output_embeddings()
    positions: list[int] = []
    hook = head.register_forward_hook(lambda module, args, out: positions.append(out.shape[1]))
    prompts = [
        chat_ids(local.tokenizer, QUESTION),
        chat_ids(local.tokenizer, [{"role": "user", "content": "Hi"}]),
    ]
    try:
        await asyncio.gather(*(local.generate(p, SamplingParams(n=3, max_tokens=4)) for p in prompts))
    finally:
        hook.remove()
    assert positions and max(positions) == 1


async def test_local_greedy_is_deterministic_and_batches_concurrent_calls(
    local: LocalBackend, monkeypatch
) -> None:
    prompt = chat_ids(local.tokenizer, QUESTION)
    calls = []
    original = local._generate_batch
    monkeypatch.setattr(local, "_generate_batch", lambda batch: calls.append(len(batch)) or original(batch))
    greedy = SamplingParams(n=2, temperature=0.0, max_tokens=8)
    a, b = await asyncio.gather(local.generate(prompt, greedy), local.generate(prompt, greedy))
    assert calls == [2]  # two requests, one generate call
    assert a[0].completion_ids == a[1].completion_ids == b[0].completion_ids
