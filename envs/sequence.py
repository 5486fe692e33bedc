"""The training sequence of a rollout, built from its token ids (``docs/architecture.md``: the trajectory).

Initial prompt ids, then per turn the model's ids (loss mask 1) and the environment's ids (loss mask 0); where
each reply's ids are is kept (``replies``), for credit per reply.
Attention covers every real token; only the loss is masked. Built from the trajectory, whose turns must
extend each other exactly (each turn's prompt starts with the previous prompt and completion): anything
else means the ids were re-tokenised somewhere, and is refused.
"""

from __future__ import annotations

from collections.abc import Sequence

from rubrics.types import TokenSequence, TrajectoryStep


class TrajectoryError(ValueError):
    """A trajectory whose turns do not extend each other token for token."""


def build_sequence(trajectory: Sequence[TrajectoryStep]) -> TokenSequence:
    """Flatten a trajectory; raises ``TrajectoryError`` if a turn does not extend the previous one."""
    if not trajectory:
        raise TrajectoryError("empty trajectory: the rollout has no model turn")
    first = trajectory[0]
    ids = list(first["prompt_ids"])
    mask = [0] * len(ids)
    logprobs = [0.0] * len(ids)
    replies: list[tuple[int, int]] = []
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
    return TokenSequence(ids=ids, loss_mask=mask, logprobs=logprobs, replies=replies)
