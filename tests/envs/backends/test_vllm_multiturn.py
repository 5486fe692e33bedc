"""A multi-turn rollout served by a real vLLM server: the trajectory's ids are exactly what the server
consumed and produced, and its logprobs are what the trainer will compute for the same tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("transformers")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from envs.backends.base import SamplingParams
from envs.backends.vllm import VllmBackend
from envs.environment import MultiTurnEnv
from envs.sequence import build_sequence
from rubrics import Rubric

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


class EchoEnv(MultiTurnEnv[None]):
    async def env_response(
        self, example: Any, rollout: Any, progress: None, messages: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        return [{"role": "user", "content": f"Turn {rollout.turn} noted. Continue."}]


def count_turns(completion: Any, **kwargs: Any) -> float:
    return float(len(completion))


async def test_multi_turn_ids_and_logprobs_are_the_served_ones(rl_vllm_server, tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    env = EchoEnv(
        [{"prompt": [{"role": "user", "content": "What is 7 times 8?"}]}],
        Rubric(funcs=[count_turns]),
        tokenizer,
        sampling=SamplingParams(temperature=0.7, max_tokens=8, seed=5),
        max_turns=3,
    )
    backend = VllmBackend([rl_vllm_server.base_url], str(tiny_model_dir))
    try:
        (state,) = await env.run_group(env.dataset[0], backend, n=1)
    finally:
        await backend.close()
    steps = state.trajectory
    assert len(steps) == 3 and state.stop_reason == "max_turns"
    sequence = build_sequence(steps)  # raises if a turn's prompt does not extend the served ids

    # the server tokenises nothing of ours: the last prompt it consumed is exactly our id list
    body = {
        "model": str(tiny_model_dir),
        "prompt": steps[-1]["prompt_ids"],
        "max_tokens": 1,
        "return_token_ids": True,
    }
    async with httpx.AsyncClient(timeout=60) as client:
        reply = (await client.post(f"{rl_vllm_server.base_url}/v1/completions", json=body)).json()
    assert reply["choices"][0]["prompt_token_ids"] == steps[-1]["prompt_ids"]

    # the inference logprobs equal the trainer's log_softmax(logits / T) on the flattened sequence
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    ids = torch.tensor([sequence.ids])
    with torch.no_grad():
        logits = model(ids).logits[0, :-1].float() / 0.7
    trainer_lp = torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None])[:, 0]
    mask = torch.tensor(sequence.loss_mask[1:], dtype=torch.bool)
    served_lp = torch.tensor(sequence.logprobs[1:])
    assert mask.sum() == sum(len(s["completion_ids"]) for s in steps)
    assert torch.allclose(trainer_lp[mask], served_lp[mask], atol=2e-3)
