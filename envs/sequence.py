"""The training sequence of a rollout, built from its token ids (``docs/architecture.md``: the trajectory).

Initial prompt ids, then per turn the model's ids (loss mask 1) and the environment's ids (loss mask 0); where
each reply's ids are is kept (``replies``), for credit per reply.
Attention covers every real token; only the loss is masked. Built from the trajectory, whose turns must
extend each other exactly (each turn's prompt starts with the previous prompt and completion): anything
else means the ids were re-tokenised somewhere, and is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rubrics.types import TrajectoryStep


class TrajectoryError(ValueError):
    """A trajectory whose turns do not extend each other token for token."""


@dataclass
class TrainingSequence:
    """One rollout flattened for the loss."""

    ids: list[int]
    """[T] every token: prompt, model turns, environment turns."""
    loss_mask: list[int]
    """[T] 1 on tokens the model sampled, 0 elsewhere."""
    logprobs: list[float]
    """[T] inference logprob of each sampled token; 0.0 where the mask is 0."""
    prompt_length: int
    """Tokens before the first model token."""
    replies: list[tuple[int, int]]
    """[turns] where each model reply's tokens are: ``ids[start:end]``, in order."""

    @property
    def completion_tokens(self) -> int:
        """Tokens the model produced."""
        return sum(self.loss_mask)


@dataclass(frozen=True)
class TokenSequence:
    """A finished rollout's training sequence, as its state keeps it (``state["sequence"]``) and the trainer
    and an evaluation read it: every list is [T]."""

    ids: list[int]
    """[T] every token: prompt, model turns, environment turns."""
    loss_mask: list[int]
    """[T] 1 on tokens the model sampled, 0 elsewhere."""
    logprobs: list[float]
    """[T] the inference engine's logprob of each sampled token; 0.0 where the mask is 0."""
    replies: list[tuple[int, int]]
    """[turns] where each model reply's tokens are: ``ids[start:end]``, in order."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Sequence[Any]]) -> TokenSequence:
        """From ``state["sequence"]`` or its JSON (``ids``, ``loss_mask``, ``logprobs``, ``replies``).

        Raises:
            KeyError: a list is missing."""
        return cls(
            ids=list(data["ids"]),
            loss_mask=list(data["loss_mask"]),
            logprobs=list(data["logprobs"]),
            replies=[(int(a), int(b)) for a, b in data.get("replies", [])],
        )

    def to_dict(self) -> dict[str, list[Any]]:
        """As ``state["sequence"]`` holds it."""
        return {
            "ids": self.ids,
            "loss_mask": self.loss_mask,
            "logprobs": self.logprobs,
            "replies": self.replies,
        }

    def row(self) -> dict[str, list[Any]]:
        """The row ``train.batching.collate`` pads (``ids``, ``loss_mask``, ``logprobs``)."""
        return {"ids": self.ids, "loss_mask": self.loss_mask, "logprobs": self.logprobs}


def build_sequence(trajectory: Sequence[TrajectoryStep]) -> TrainingSequence:
    """Flatten a trajectory; raises ``TrajectoryError`` if a turn does not extend the previous one."""
    if not trajectory:
        raise TrajectoryError("empty trajectory: the rollout has no model turn")
    first = trajectory[0]
    ids = list(first["prompt_ids"])
    mask = [0] * len(ids)
    logprobs = [0.0] * len(ids)
    replies = []
    for turn, step in enumerate(trajectory):
        prompt = step["prompt_ids"]
        if prompt[: len(ids)] != ids:
            at = next(
                (i for i, (a, b) in enumerate(zip(prompt, ids, strict=False)) if a != b),
                min(len(prompt), len(ids)),
            )
            raise TrajectoryError(f"turn {turn}: prompt ids diverge from the earlier turns at position {at}")
        env_ids = prompt[len(ids) :]
        ids += env_ids
        mask += [0] * len(env_ids)
        logprobs += [0.0] * len(env_ids)
        completion, lps = step["completion_ids"], step["completion_logprobs"]
        if len(completion) != len(lps):
            raise TrajectoryError(f"turn {turn}: {len(completion)} completion ids but {len(lps)} logprobs")
        replies.append((len(ids), len(ids) + len(completion)))
        ids += completion
        mask += [1] * len(completion)
        logprobs += list(lps)
    return TrainingSequence(
        ids=ids, loss_mask=mask, logprobs=logprobs, prompt_length=len(first["prompt_ids"]), replies=replies
    )
