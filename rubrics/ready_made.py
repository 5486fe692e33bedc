"""Ready-made rubrics used by the quick start and the tests."""

from __future__ import annotations

from typing import Any

from rubrics.group import RubricGroup
from rubrics.math_rubric import MathRubric
from rubrics.parsers import ThinkParser
from rubrics.rubric import Rubric
from rubrics.types import Messages


def math_with_format(format_weight: float = 0.2) -> RubricGroup:
    """Math correctness (``MathRubric`` on the answer after ``</think>``) plus a think-format reward."""
    parser = ThinkParser()
    return RubricGroup(
        [
            MathRubric(parser=parser),
            Rubric(funcs=[parser.get_format_reward_func()], weights=[format_weight], parser=parser),
        ]
    )


def vowel_ratio(completion: Messages | str, **kwargs: Any) -> float:
    """Share of letters in the reply that are vowels: a toy reward with variance even on random text
    (smoke tests and benchmarks of the trainer)."""
    text = (
        completion if isinstance(completion, str) else " ".join(str(m.get("content", "")) for m in completion)
    )
    letters = [c for c in text.lower() if c.isalpha()]
    return sum(c in "aeiou" for c in letters) / len(letters) if letters else 0.0


def toy_vowels() -> Rubric:
    """A single-turn rubric with one toy reward (``vowel_ratio``)."""
    return Rubric(funcs=[vowel_ratio])
