"""``MultiStepMultiTurnEnv``: the progressive-reveal environment of seed 004.

Each model reply is judged against the current frontier of requirements (concurrently). A requirement
judged correct unlocks the requirements of its ground-truth answer. Those unlocked by a requirement
without ``revealed_info`` are judged on the same reply at once (one reply can cover several steps); those
unlocked by a requirement with ``revealed_info`` wait: the revealed text becomes the next user message and
they are judged on the model's next reply. A requirement judged incorrect closes its branch. No turn is
spent without a model reply, no two assistant messages follow each other, and every reply is judged.

A rollout stops when nothing is left to judge (``terminal``: every branch reached its end; ``incorrect``:
some branch was closed), at ``max_turns`` or at the token budget (``token_budget``). The verdicts are left
in ``state["multistep"]`` so the rubric computes the reward without judging anything twice.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from envs.backends.base import InferenceBackend, SamplingParams
from envs.chat import chat_ids, next_turn_ids
from envs.environment import MultiTurnEnv, completion_messages
from rubrics.multistep.evaluation import Walk
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.scenario import Scenario
from rubrics.rubric import Rubric
from rubrics.types import State

DEFAULT_SYSTEM_PROMPT = (
    "You are working through a real situation that unfolds over several turns. In each reply, say what you "
    "observe, what you decide and what you do next, specifically for this situation. New information will "
    "arrive as the situation develops."
)


def scenario_example(scenario: Scenario) -> dict[str, Any]:
    """A dataset example for a scenario: ground truth in ``answer``, reveals in ``info``."""
    return {
        "prompt": scenario.prompt,
        "answer": scenario.answers,
        "task": "multistep",
        "info": {"scenario": scenario.name, "revealed_info": dict(scenario.revealed_info)},
    }


class MultiStepMultiTurnEnv(MultiTurnEnv):
    """Progressive reveal: satisfied requirements reveal the next piece of the scenario."""

    def __init__(
        self,
        multistep_rubric: MultiStepRubric,
        scenarios: Sequence[Scenario],
        tokenizer: Any,
        rubric: Rubric | None = None,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        sampling: SamplingParams | None = None,
        max_turns: int = 6,
        max_total_tokens: int = 4096,
    ) -> None:
        for s in scenarios:
            s.validate(multistep_rubric)
        super().__init__(
            [scenario_example(s) for s in scenarios],
            rubric if rubric is not None else multistep_rubric,
            tokenizer,
            system_prompt=system_prompt,
            sampling=sampling,
            max_turns=max_turns,
            max_total_tokens=max_total_tokens,
        )
        self.multistep_rubric = multistep_rubric
        """Whose requirements are judged turn by turn."""

    async def rollout(self, example: dict[str, Any], backend: InferenceBackend) -> State:
        messages = self.initial_messages(example)
        state = self.new_state(example, messages)
        state["timing"]["judge_ms"] = 0.0
        reveals: dict[str, str] = example.get("info", {}).get("revealed_info", {})
        walk = self.multistep_rubric.walk(example["answer"])
        prompt_ids = chat_ids(self.tokenizer, messages)
        if len(prompt_ids) >= self.max_total_tokens:
            state["error"] = (
                f"prompt of {len(prompt_ids)} tokens exceeds the token budget {self.max_total_tokens}"
            )
            return state
        stop = ""
        while not stop:
            budget = self.max_total_tokens - len(prompt_ids)
            if budget < 1:
                stop = "token_budget"
                break
            start = time.perf_counter()
            params = replace(self.sampling, n=1, max_tokens=min(self.sampling.max_tokens, budget))
            (sample,) = await backend.generate(prompt_ids, params)
            state["timing"]["generation_ms"] += (time.perf_counter() - start) * 1000.0
            self.record_turn(state, prompt_ids, sample, messages)
            reply = {"role": "assistant", "content": sample.text}

            start = time.perf_counter()
            texts = await self._judge_reply(walk, reveals, messages, reply, state["turn"])
            state["timing"]["judge_ms"] += (time.perf_counter() - start) * 1000.0
            messages = [*messages, reply]
            if walk.done:
                stop = walk.stop_reason()
            elif state["turn"] >= self.max_turns:
                stop = "max_turns"
            else:
                reveal = {"role": "user", "content": "\n\n".join(texts)}
                new_ids = (
                    prompt_ids
                    + sample.completion_ids
                    + next_turn_ids(self.tokenizer, prompt_ids, sample.completion_ids, [*messages, reveal])
                )
                if len(new_ids) >= self.max_total_tokens:
                    stop = "token_budget"
                else:
                    completion_messages(state).append(reveal)
                    messages.append(reveal)
                    prompt_ids = new_ids
        state["stop_reason"] = stop
        result = walk.result
        result.stop_reason = stop
        state["multistep"] = result.to_dict()
        return self.finish_rollout(state)

    async def _judge_reply(
        self,
        walk: Walk,
        reveals: dict[str, str],
        history: list[dict[str, Any]],
        reply: dict[str, Any],
        turn: int,
    ) -> list[str]:
        """Judge one reply as far as it goes; leaves the requirements that wait for a reveal in the walk's
        frontier and returns the texts to reveal."""
        graph = self.multistep_rubric.graph
        waiting: list[str] = []
        texts: list[str] = []
        now = list(walk.frontier)
        while now:
            walk.frontier = now
            new = await walk.judge_frontier(history, [reply], turn)
            plain: set[str] = set()
            for r in new:
                if not r.correct:
                    continue
                unlocked = graph.requirements[r.name].route(r.truth)
                if r.name in reveals and unlocked:
                    texts.append(reveals[r.name])
                else:
                    plain.update(unlocked)
            now = [n for n in walk.frontier if n in plain]
            waiting += [n for n in walk.frontier if n not in plain and n not in waiting]
        walk.frontier = waiting
        return texts
