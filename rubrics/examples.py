"""Ready-made rubrics used by the quick start and the tests."""

from __future__ import annotations

from rubrics.group import RubricGroup
from rubrics.math_rubric import MathRubric
from rubrics.parsers import ThinkParser
from rubrics.rubric import Rubric


def math_with_format(format_weight: float = 0.2) -> RubricGroup:
    """Math correctness (``MathRubric`` on the answer after ``</think>``) plus a think-format reward."""
    parser = ThinkParser()
    return RubricGroup(
        [
            MathRubric(parser=parser),
            Rubric(funcs=[parser.get_format_reward_func()], weights=[format_weight], parser=parser),
        ]
    )
