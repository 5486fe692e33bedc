"""A backend that replies with fixed texts, tokenised by the real tokenizer (for environment logic tests).

They speak the real ``TrainingBackend`` protocol (weights in process: nothing to sync), so the trainer can
run on them too; the engine tests use the real local and vLLM backends.
"""

from __future__ import annotations

from typing import Any

from envs.backends.base import BackendError, InProcessWeights, Sample, SamplingParams


class ScriptedBackend(InProcessWeights):
    """Returns ``replies[k]`` on a rollout's k-th turn (k counted from the messages already in the prompt:
    each earlier turn added an assistant and a user message, two end-of-message tokens)."""

    def __init__(self, tokenizer: Any, replies: list[str], eos: str = "<|im_end|>") -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.replies = replies
        self.eos_id = tokenizer.convert_tokens_to_ids(eos)
        self.prompts: list[list[int]] = []
        self.base: int | None = None  # end-of-message tokens in a first-turn prompt

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Sample]:
        self.prompts.append(list(prompt_ids))
        ends = prompt_ids.count(self.eos_id)
        self.base = ends if self.base is None else min(self.base, ends)
        turn = (ends - self.base) // 2
        text = self.replies[min(turn, len(self.replies) - 1)]
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])[: params.max_tokens - 1]
        ids = [*ids, self.eos_id]
        return [
            Sample(
                completion_ids=ids,
                logprobs=[-1.0] * len(ids),
                text=self.tokenizer.decode(ids, skip_special_tokens=True),
                finish_reason="stop",
            )
            for _ in range(params.n)
        ]

    async def close(self) -> None:
        return None


class CyclingBackend(ScriptedBackend):
    """Returns ``replies`` in turn, one per ``generate`` call, whatever the turn: rollouts of one group that
    run concurrently get different replies, so the group has reward variance."""

    def __init__(self, tokenizer: Any, replies: list[str], eos: str = "<|im_end|>") -> None:
        super().__init__(tokenizer, replies, eos)
        self.calls = 0

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Sample]:
        reply = self.replies[self.calls % len(self.replies)]
        self.calls += 1
        ids = [*list(self.tokenizer(reply, add_special_tokens=False)["input_ids"])[: params.max_tokens - 1]]
        ids.append(self.eos_id)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return [Sample(ids, [-1.0] * len(ids), text, "stop") for _ in range(params.n)]


class FlakyBackend(CyclingBackend):
    """A backend whose every ``fail_every``-th request fails, as a server that went away does."""

    def __init__(self, tokenizer: Any, replies: list[str], fail_every: int) -> None:
        super().__init__(tokenizer, replies)
        self.fail_every = fail_every

    async def generate(self, prompt_ids: list[int], params: SamplingParams):
        if (self.calls + 1) % self.fail_every == 0:
            self.calls += 1
            raise BackendError("vLLM server http://127.0.0.1:1 failed after 3 attempt(s): connection refused")
        return await super().generate(prompt_ids, params)
