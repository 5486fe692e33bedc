"""Scored rollouts by hand: a finished state, or a ``ScoredRollout``, with what a test names and a healthy
default for the rest."""

from __future__ import annotations

from typing import Any

from envs.rollout import ScoredRollout
from rubrics.types import State


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
    """``finished(**fields)`` as a ``ScoredRollout`` (typed fields, such as ``multistep``, given typed)."""
    typed = {k: fields.pop(k) for k in ("multistep", "criteria") if k in fields}
    return ScoredRollout.from_state({**finished(**fields), **typed})  # type: ignore[typeddict-item]
