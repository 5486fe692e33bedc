"""The LLM judge client against a real ``vllm serve`` of the tiny model: a structured verdict comes back."""

from __future__ import annotations

from pathlib import Path

import pytest

from rubrics.judges import LLMJudgeClient, binary_judge_response_format, build_judge_messages

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


async def test_structured_verdict_from_a_real_vllm_server(vllm_server, tiny_model_dir: Path) -> None:
    client = LLMJudgeClient(
        f"{vllm_server.base_url}/v1", str(tiny_model_dir), max_tokens=96, timeout_s=60, max_attempts=2
    )
    fmt = binary_judge_response_format
    schema = fmt.json_schema()
    # The random test model writes free text until it is stopped: bound the reasoning for it.
    schema["properties"][fmt.reasoning_key]["maxLength"] = 24
    messages = build_judge_messages(
        "Does the response check that the scene is safe?",
        "You arrive at a crash.",
        "The scene is safe.",
        {"answer": 1.0, "reasoning": "No hazards."},
        fmt,
        system_prompt="Judge.",
    )
    verdict = await client.complete(messages, parse=fmt.convert, schema=schema)
    assert verdict.answer in (0.0, 1.0)
    assert isinstance(verdict.reasoning, str) and len(verdict.reasoning) <= 24
    assert client.stats.failures == 0
    again = await client.complete(messages, parse=fmt.convert, schema=schema)
    assert again == verdict and client.stats.cache_hits == 1
