"""Score a file of rollouts with a rubric: the ``rubric-grpo score`` command's logic.

Input is JSONL, one state per line. Lines that share a ``group`` value are scored together with
``score_group`` (group functions and advantages); a line without one is its own group. Every line is
validated before anything is scored, and errors name the file, the line and the reason.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rubrics.rubric import Rubric
from rubrics.types import EvaluationResult, State


class InputError(ValueError):
    """Bad input: the message names the file, the place and the reason."""


def import_rubric(spec: str) -> Rubric:
    """Resolve ``module:attribute`` to a Rubric (an instance, or a callable that returns one)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InputError(
            f"rubric {spec!r}: expected 'module:attribute', e.g. 'rubrics.ready_made:math_with_format'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"rubric {spec!r}: cannot import module {module_name!r}: {exc}") from exc
    try:
        obj: Any = getattr(module, attr)
    except AttributeError as exc:
        raise InputError(f"rubric {spec!r}: module {module_name!r} has no attribute {attr!r}") from exc
    if not isinstance(obj, Rubric) and callable(obj):
        obj = obj()
    if not isinstance(obj, Rubric):
        raise InputError(
            f"rubric {spec!r}: {attr!r} is {type(obj).__name__}, not a Rubric or a factory of one"
        )
    return obj


def read_states(path: Path) -> list[State]:
    """Read and validate a JSONL file of states."""
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    states: list[State] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(
                    f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})"
                ) from exc
            if not isinstance(item, dict):
                raise InputError(
                    f"{path}:{lineno}: expected a JSON object (a state), got {type(item).__name__}"
                )
            if "completion" not in item:
                raise InputError(f"{path}:{lineno}: field 'completion' is missing")
            completion = item["completion"]
            if not isinstance(completion, str | list):
                raise InputError(
                    f"{path}:{lineno}: field 'completion' must be a string or a list of messages"
                )
            if isinstance(item.get("multistep"), dict):  # verdicts written out: typed again
                try:
                    item["multistep"] = EvaluationResult.from_dict(item["multistep"])
                except (TypeError, ValueError) as exc:
                    raise InputError(f"{path}:{lineno}: field 'multistep': {exc}") from exc
            states.append(item)  # type: ignore[arg-type]
    if not states:
        raise InputError(f"{path}: no states (the file is empty)")
    return states


@dataclass
class Summary:
    """What scoring a file produced."""

    rollouts: int
    groups: int
    errored: int
    reward_mean: float
    metrics_mean: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return {
            "rollouts": self.rollouts,
            "groups": self.groups,
            "errored": self.errored,
            "reward_mean": self.reward_mean,
            "metrics_mean": self.metrics_mean,
        }


def group_states(states: list[State]) -> list[list[State]]:
    """Split states into scoring groups by their ``group`` field, keeping file order."""
    groups: dict[Any, list[State]] = {}
    for i, state in enumerate(states):
        key = state.get("group", ("__line__", i))
        groups.setdefault(json.dumps(key, sort_keys=True, default=str), []).append(state)
    return list(groups.values())


async def score_states(
    rubric: Rubric, states: list[State], on_group: Callable[[list[State]], None] | None = None
) -> Summary:
    """Score every group concurrently; returns a summary (NaN-free means over healthy rollouts)."""
    groups = group_states(states)

    async def run(group: list[State]) -> None:
        await rubric.score_group(group)
        if on_group is not None:
            on_group(group)

    await asyncio.gather(*(run(g) for g in groups))
    healthy = [s for s in states if not s.get("error")]
    sums: dict[str, list[float]] = {}
    for s in healthy:
        for k, v in s.get("metrics", {}).items():
            if math.isfinite(v):
                sums.setdefault(k, []).append(v)
    return Summary(
        rollouts=len(states),
        groups=len(groups),
        errored=len(states) - len(healthy),
        reward_mean=sum(s["reward"] for s in healthy) / len(healthy) if healthy else math.nan,
        metrics_mean={k: sum(v) / len(v) for k, v in sorted(sums.items())},
    )
