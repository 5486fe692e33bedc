"""Single- and multi-turn environments on the tiny model: the recorded trajectory, token-in/token-out ids
that render as the conversation, and stop reasons."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from transformers import AutoTokenizer

from envs.backends import LocalBackend, SamplingParams
from envs.chat import chat_ids, render
from envs.environment import MultiTurnEnv, SingleTurnEnv
from envs.sequence import TrajectoryError, build_sequence
from rubrics import Rubric
from rubrics.types import StopReason
from tests.support.scripted_backend import ScriptedBackend

from .helpers import QUESTION, length_reward

# -- environments ------------------------------------------------------------------------------------


async def test_single_turn_env_records_the_trajectory(local: LocalBackend) -> None:
    env = SingleTurnEnv(
        [{"prompt": "What is 7 times 8?", "answer": "56"}],
        Rubric(funcs=[length_reward]),
        local.tokenizer,
        system_prompt="Be brief.",
        sampling=SamplingParams(temperature=1.0, max_tokens=10),
    )
    rollouts = await env.run_group(env.dataset[0], local, n=4)
    prompt_ids = chat_ids(local.tokenizer, [{"role": "system", "content": "Be brief."}, *QUESTION])
    for r in rollouts:
        (step,) = r.trajectory
        assert step["prompt_ids"] == prompt_ids
        assert len(step["completion_ids"]) == len(step["completion_logprobs"]) <= 10
        assert r.reward == float(len(r.completion[0]["content"]))
        assert r.timing["generation_ms"] > 0 and r.timing["scoring_ms"] >= 0
    assert not hasattr(rollouts[0], "advantage")  # advantages are the caller's (rubrics.advantages)


class EchoEnv(MultiTurnEnv[None]):
    async def env_response(self, example, rollout, progress, messages) -> list[dict[str, Any]]:
        return [{"role": "user", "content": f"Turn {rollout.turn} done. Go on."}]


async def test_multi_turn_ids_are_the_served_ids_and_render_as_the_conversation(local: LocalBackend) -> None:
    env = EchoEnv(
        [{"prompt": QUESTION}],
        Rubric(funcs=[length_reward]),
        local.tokenizer,
        sampling=SamplingParams(temperature=1.0, max_tokens=6),
        max_turns=3,
    )
    (rollout,) = await env.rollout_group(env.dataset[0], local, n=1)
    steps = rollout.trajectory
    assert len(steps) == 3 and rollout.stop_reason == "max_turns"
    for prev, nxt in itertools.pairwise(steps):
        # each turn's prompt extends the previous prompt and the model's exact ids (never re-tokenised)
        seen = prev["prompt_ids"] + prev["completion_ids"]
        assert nxt["prompt_ids"][: len(seen)] == seen
    roles = [m["role"] for m in rollout.completion]
    assert roles == ["assistant", "user", "assistant", "user", "assistant"]
    sequence = build_sequence(steps)  # model tokens masked in, environment tokens out
    assert sequence.ids == steps[-1]["prompt_ids"] + steps[-1]["completion_ids"]
    assert sequence.completion_tokens == sum(len(s["completion_ids"]) for s in steps)
    for s in steps:
        start = len(s["prompt_ids"])
        assert sequence.loss_mask[start - 1] == 0 and all(
            sequence.loss_mask[start : start + len(s["completion_ids"])]
        )
        assert sequence.logprobs[start : start + len(s["completion_ids"])] == s["completion_logprobs"]
    # where each reply is: right after its turn's prompt, as long as its completion
    assert sequence.replies == [
        (len(s["prompt_ids"]), len(s["prompt_ids"]) + len(s["completion_ids"])) for s in steps
    ]
    assert rollout.sequence == sequence
    broken = [dict(steps[0]), {**steps[1], "prompt_ids": [7, *steps[1]["prompt_ids"][1:]]}]
    with pytest.raises(
        TrajectoryError, match="turn 1: prompt ids diverge from the earlier turns at position 0"
    ):
        build_sequence(broken)
    # the env ids are exactly the template's rendering of the new message
    last = steps[-1]
    text = local.tokenizer.decode(last["prompt_ids"], skip_special_tokens=False)
    messages = [*QUESTION, *rollout.completion[:-1]]
    assert text.endswith(render(local.tokenizer, messages, True)[-40:])


class StoppingEnv(MultiTurnEnv[None]):
    """Stops on a reply that says "stop" (with the reason the reply names, if any)."""

    async def is_completed(self, example, rollout, progress, messages) -> bool | StopReason:
        text = messages[-1]["content"]
        if "terminal" in text:
            return StopReason.TERMINAL
        if "custom" in text:
            rollout.stop_reason = "custom"
        return "stop" in text

    async def env_response(self, example, rollout, progress, messages) -> list[dict[str, Any]]:
        return [] if "silence" in messages[-1]["content"] else [{"role": "user", "content": "Go on."}]


@pytest.mark.parametrize(
    ("replies", "stop", "turns"),
    [
        (["go", "stop"], "completed", 2),  # True: completed
        (["stop custom"], "custom", 1),  # True keeps the reason the subclass set
        (["go", "terminal"], "terminal", 2),  # a StopReason is recorded as its plain value
        (["silence"], "completed", 1),  # env_response had nothing to say
        (["go", "go", "go"], "max_turns", 3),
    ],
)
async def test_multi_turn_stop_reasons(
    tiny_model_dir: Path, replies: list[str], stop: str, turns: int
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    env = StoppingEnv([{"prompt": QUESTION}], Rubric(funcs=[length_reward]), tokenizer, max_turns=3)
    (rollout,) = await env.rollout_group(env.dataset[0], ScriptedBackend(tokenizer, replies), n=1)
    assert rollout.stop_reason == stop and type(rollout.stop_reason) is str and rollout.turn == turns
