"""The weighted-criteria autograders' scoring formulas, exactly, in one place.

Per-criterion graders (a MET criterion adds its weight, an UNMET one nothing):

    raw_score = sum(w_i for MET criteria)
    score     = clamp(raw_score / sum(max(0, w_i)), 0, 1)            normalize=True, some weight > 0
    score     = clamp(1 + raw_score / sum(|w_i|), 0, 1)              normalize=True, no weight > 0
    score     = raw_score                                            normalize=False

The second line is the all-negative rule (an error-detection rubric: avoiding every error scores 1.0); it
also covers negative weights mixed with zeros. Defined result where the formulas would divide by zero: a
rubric whose weights are all zero scores 0.0 (nothing can be earned or lost).

Holistic grader (the model gives ``llm_raw_score`` from 0 to 100):

    raw_score = llm_raw_score / 100 * sum(max(0, w_i))
    score     = clamp(llm_raw_score / 100, 0, 1)                     normalize=True (135 -> 1.0)
    score     = raw_score                                            normalize=False
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def clamp(x: float, low: float = 0.0, high: float = 1.0) -> float:
    """``x`` limited to ``[low, high]``."""
    return min(high, max(low, x))


def positive_points(weights: Sequence[float]) -> float:
    """``sum(max(0, w_i))``: what a response can earn, the normalised score's denominator (HealthBench's
    positive points)."""
    return math.fsum(max(0.0, w) for w in weights)


def per_criterion_score(
    weights: Sequence[float], met: Sequence[bool], normalize: bool = True
) -> tuple[float, float]:
    """``(score, raw_score)`` for MET/UNMET verdicts."""
    if len(weights) != len(met):
        raise ValueError(f"{len(weights)} weights but {len(met)} verdicts")
    raw = math.fsum(w for w, m in zip(weights, met, strict=True) if m)
    if not normalize:
        return raw, raw
    positive = positive_points(weights)
    if positive > 0:
        return clamp(raw / positive), raw
    magnitude = math.fsum(abs(w) for w in weights)
    if magnitude > 0:  # no positive weight: the all-negative rule
        return clamp(1.0 + raw / magnitude), raw
    return 0.0, raw  # every weight is zero


def holistic_score(
    weights: Sequence[float], llm_raw_score: float, normalize: bool = True
) -> tuple[float, float]:
    """``(score, raw_score)`` for a 0-100 holistic score."""
    raw = llm_raw_score / 100.0 * positive_points(weights)
    return (clamp(llm_raw_score / 100.0), raw) if normalize else (raw, raw)
