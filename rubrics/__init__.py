"""rubrics: everything that turns a rollout into numbers.

Imports neither torch nor transformers, and nothing from ``envs`` or ``train``.
"""

from rubrics.binding import RewardFuncBindingError
from rubrics.group import RubricGroup
from rubrics.math_rubric import MathRubric
from rubrics.parsers import Parser, ThinkParser, XMLParser
from rubrics.process_pool import cpu_bound
from rubrics.rubric import Rubric
from rubrics.types import GroupRewardFunc, IndividualRewardFunc, Messages, RewardFunc, State

__version__ = "0.1.0"

__all__ = [
    "GroupRewardFunc",
    "IndividualRewardFunc",
    "MathRubric",
    "Messages",
    "Parser",
    "RewardFunc",
    "RewardFuncBindingError",
    "Rubric",
    "RubricGroup",
    "State",
    "ThinkParser",
    "XMLParser",
    "cpu_bound",
]
