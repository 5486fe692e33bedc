"""Rubric scaffolding (RuscaRL: "Breaking the Exploration Bottleneck: Rubric-Scaffolded Reinforcement
Learning", 2025): during training, some of an example's positive criteria are appended to its prompt as
hints, a share that decays over the run (``env.scaffold``, ``envs.config.ScaffoldConfig``).

``scheduled_share`` is the step's share, a function of the step alone (so a resumed run shows what the
uninterrupted one would); ``rollout_shares`` spreads it over a group (``per_rollout``); ``chosen_hints``
picks which positive criteria a rollout is shown, seeded by (seed, step, example, rollout) alone. Pitfalls
(negative weights) are never hints. The reward still grades the reply against every criterion.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence

from envs.config import ScaffoldConfig
from rubrics.criteria.criterion import Criterion
from rubrics.criteria.example import CriteriaExample

SIGMOID_STEEPNESS = 10.0
"""How sharp the sigmoid schedule's fall is: the logistic curve over the decay, from ``-5`` to ``+5``,
rescaled to run exactly from ``share_start`` to ``share_end``."""

HINT_HEADER = "Points a good answer covers:"
"""The line that opens the hints appended to the prompt's last user message."""


def decay(schedule: str, progress: float) -> float:
    """How much of the decay is still to come at ``progress`` (0 at the decay's start, 1 at its end, clamped):
    1 at the start, 0 at the end, a straight line (``linear``) or a rescaled logistic curve (``sigmoid``)."""
    x = min(max(progress, 0.0), 1.0)
    if schedule == "linear":
        return 1.0 - x
    if schedule != "sigmoid":
        raise ValueError(f"unknown scaffold schedule {schedule!r} (sigmoid or linear)")
    k = SIGMOID_STEEPNESS

    def logistic(t: float) -> float:
        return 1.0 / (1.0 + math.exp(-t))

    top, bottom = logistic(k / 2), logistic(-k / 2)
    return (logistic(k * (0.5 - x)) - bottom) / (top - bottom)


def scheduled_share(cfg: ScaffoldConfig, step: int, max_steps: int) -> float:
    """The share of positive criteria shown at 0-based ``step`` of a run of ``max_steps``: ``share_start`` at
    step 0, ``share_end`` from step ``decay_fraction * (max_steps - 1)`` on."""
    span = max(cfg.decay_fraction * (max_steps - 1), 1.0)
    return cfg.share_end + (cfg.share_start - cfg.share_end) * decay(cfg.schedule, step / span)


def rollout_shares(cfg: ScaffoldConfig, share: float, n: int) -> list[float]:
    """The share each of a group's ``n`` rollouts is shown: ``share`` for every one (``same``), or
    ``share * i / (n - 1)`` for rollout ``i`` (``graded``: the first sees no hint, the last ``share``)."""
    if cfg.per_rollout == "same" or n == 1:
        return [share] * n
    return [share * i / (n - 1) for i in range(n)]


def positive_criteria(example: CriteriaExample) -> list[Criterion]:
    """The criteria that may be hints: those of positive weight, in the example's order."""
    return [c for c in example.criteria if c.weight > 0]


def chosen_hints(example: CriteriaExample, share: float, seed: int, step: int, index: int) -> list[Criterion]:
    """The positive criteria rollout ``index`` of ``example`` is shown at ``step``: ``share`` of them, rounded
    to the nearest count (halves up), drawn by a generator seeded from (seed, step, example id, index), in the
    example's order."""
    positive = positive_criteria(example)
    count = min(len(positive), math.floor(share * len(positive) + 0.5))
    if count == 0:
        return []
    key = f"{seed}:{step}:{example.id}:{index}".encode()
    rng = random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))
    picked = set(rng.sample(range(len(positive)), count))
    return [c for i, c in enumerate(positive) if i in picked]


def hint_text(hints: Sequence[Criterion]) -> str:
    """The text appended to the prompt for ``hints`` (empty without any): a header, one requirement a
    line."""
    if not hints:
        return ""
    return "\n\n" + "\n".join([HINT_HEADER, *(f"- {c.requirement}" for c in hints)])


def hint_key(criterion: Criterion) -> str:
    """How a hint is recorded in ``Rollout.info["scaffold_hints"]``: its name, else its requirement."""
    return criterion.name or criterion.requirement
