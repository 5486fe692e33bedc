"""Evaluated rollouts by hand: a ``ScoredRollout`` with what a test names and a healthy default for the rest."""

from __future__ import annotations

from typing import Any

from envs.rollout import ScoredRollout


def scored(**fields: Any) -> ScoredRollout:
    """A scored rollout with ``fields`` (``scenario="a"`` sets ``info["scenario"]``); the rest of a healthy
    one-turn rollout that earned nothing."""
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
    return ScoredRollout(**{**base, **fields})
