"""The replay backend: a demonstration's replies as a model would sample them, one a call, refused past the
last; cut at the token limit as a sampled reply is."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from envs.backends.base import BackendError, SamplingParams
from envs.backends.replay import ReplayBackend, reply_ids
from envs.chat import chat_ids

CONVERSATION = [
    {"role": "user", "content": "A man collapsed."},
    {"role": "assistant", "content": "The scene is safe."},
    {"role": "user", "content": "He does not respond."},
    {"role": "assistant", "content": "He is unresponsive."},
]


def test_replies_are_the_templates_tokens_between_the_generation_prompt_and_the_turns_end(
    tiny_model_dir: Path,
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    replies = reply_ids(tokenizer, "Be brief.", CONVERSATION, [end])
    assert len(replies) == 2 and all(r[-1] == end and end not in r[:-1] for r in replies)
    # the first reply after its prompt is the conversation so far, as the template renders it, token for token
    system = [{"role": "system", "content": "Be brief."}]
    prompt = chat_ids(tokenizer, [*system, CONVERSATION[0]], add_generation_prompt=True)
    whole = chat_ids(tokenizer, [*system, *CONVERSATION[:2]], add_generation_prompt=False)
    assert whole[: len(prompt) + len(replies[0])] == prompt + replies[0]
    with pytest.raises(ValueError, match="assistant message 0: the template ends it with no stop token"):
        reply_ids(tokenizer, None, CONVERSATION, [-1])

    backend = ReplayBackend(replies, tokenizer)
    params = SamplingParams(max_tokens=64)
    (first,) = asyncio.run(backend.generate(prompt, params))
    assert first.completion_ids == replies[0] and first.text == "The scene is safe."
    assert first.finish_reason == "stop" and all(math.isnan(x) for x in first.logprobs)
    (cut,) = asyncio.run(backend.generate(prompt, SamplingParams(max_tokens=2)))
    assert cut.completion_ids == replies[1][:2] and cut.finish_reason == "length"
    with pytest.raises(BackendError, match="replay: the rollout asked for reply 3 of 2"):
        asyncio.run(backend.generate(prompt, params))
    with pytest.raises(BackendError, match="replay: one rollout at a time, not n=2"):
        asyncio.run(ReplayBackend(replies, tokenizer).generate(prompt, SamplingParams(n=2)))
