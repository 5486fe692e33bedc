"""A backend that samples nothing: it plays fixed replies, one per call, in order.

Played through an environment (``Environment.run_group(example, ReplayBackend(...), 1)``), a demonstration
becomes a rollout like any other: the environment builds its prompts, reveals, token sequence and reward
exactly as for a sampled rollout, so the demonstration is judged by the same walk and trained on as the same
kind of sequence. The trainer's guided groups (``rollout.guide``, ``docs/training.md``) add one such rollout
of the scenario's ideal conversation to each group: the group then always holds a rollout that passed the
steps its sampled rollouts never pass.

The replies carry no sampling logprob (NaN): the importance-sampling correction counts a NaN as no mismatch,
so a replayed token trains with the policy's own ratio, starting at 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from envs.backends.base import BackendError, Sample, SamplingParams
from envs.chat import assistant_turns


def reply_ids(
    tokenizer: Any, system_prompt: str | None, messages: Sequence[dict[str, str]], stop_ids: Sequence[int]
) -> list[list[int]]:
    """The token ids a model would sample for each assistant message of ``messages`` (a conversation that
    starts with a user message): its ids under the chat template (``envs.chat.assistant_turns``), cut after
    the first of ``stop_ids`` (the end-of-turn token a model samples last).

    Raises:
        TemplatePrefixError: the template does not extend the earlier turns verbatim.
        ValueError: an assistant message ends in no token of ``stop_ids``."""
    replies: list[list[int]] = []
    for _, turn in assistant_turns(tokenizer, system_prompt, messages):
        end = next((i for i, t in enumerate(turn) if t in stop_ids), None)
        if end is None:
            raise ValueError(f"assistant message {len(replies)}: the template ends it with no stop token")
        replies.append(turn[: end + 1])
    return replies


class ReplayBackend:
    """Plays ``replies`` (token ids), one per ``generate`` call, in order; one rollout's worth."""

    def __init__(self, replies: Sequence[list[int]], tokenizer: Any) -> None:
        self.replies = [list(r) for r in replies]
        """The replies, in the order the rollout asks for them."""
        self.tokenizer = tokenizer
        """Decodes a reply to its text, as a sampling backend does."""
        self.played = 0
        """Replies played so far."""

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Sample]:
        """The next reply, cut at ``params.max_tokens`` (then ``length``, as a sampled reply would be).

        Raises:
            BackendError: asked for more than one sample, or for a reply past the last."""
        if params.n != 1:
            raise BackendError(f"replay: one rollout at a time, not n={params.n}")
        if self.played >= len(self.replies):
            raise BackendError(
                f"replay: the rollout asked for reply {self.played + 1} of {len(self.replies)}"
            )
        ids = self.replies[self.played]
        self.played += 1
        reason = "stop"
        if len(ids) > params.max_tokens:
            ids, reason = ids[: params.max_tokens], "length"
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return [Sample(completion_ids=ids, logprobs=[math.nan] * len(ids), text=text, finish_reason=reason)]

    async def close(self) -> None:
        """Nothing to release."""
