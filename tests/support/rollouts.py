"""Scored rollouts by hand: a finished state, or a ``ScoredRollout``, with what a test names and a healthy
default for the rest."""

from __future__ import annotations

from typing import Any

from envs.rollout import ScoredRollout, rewards_and_errors, scored_groups
from rubrics.advantages import ReplyCredit, episode_credit
from rubrics.types import Rollout, State, TokenSequence


def finished(**fields: Any) -> State:
    """A finished state with every key an environment writes (``scenario="a"`` sets ``info["scenario"]``):
    ``fields``, and the rest of a one-turn rollout that earned nothing."""
    scenario = fields.pop("scenario", None)
    base: dict[str, Any] = {
        "prompt": [{"role": "user", "content": f"play {scenario}"}],
        "completion": [{"role": "assistant", "content": "ok"}],
        "answer": "",
        "task": "default",
        "info": {} if scenario is None else {"scenario": scenario},
        "trajectory": [],
        "timing": {},
        "turn": 1,
        "is_truncated": False,
        "stop_reason": "completed",
        "reward": 0.0,
        "metrics": {},
        "advantage": 0.0,
    }
    state: State = {**base, **fields}  # type: ignore[typeddict-item]
    return state


def scored(**fields: Any) -> ScoredRollout:
    """``finished(**fields)`` as a ``ScoredRollout`` (typed fields, such as ``multistep``, given typed; a
    ``sequence`` or ``reply_credit`` may be given as plain data)."""
    data: dict[str, Any] = dict(finished(**fields))
    if isinstance(data.get("sequence"), dict):
        data["sequence"] = TokenSequence.from_dict(data["sequence"])
    if data.get("reply_credit") is not None:
        data["reply_credit"] = [
            c if isinstance(c, ReplyCredit) else ReplyCredit(c["node"], c["reward_to_go"])
            for c in data["reply_credit"]
        ]
    return ScoredRollout(**data)


def with_advantages(group: list[Rollout]) -> list[ScoredRollout]:
    """A scored group of rollouts, frozen with its unscaled advantages (as an evaluation does)."""
    (scored_group,) = scored_groups([group], episode_credit(*rewards_and_errors([group])))
    return scored_group.rollouts
