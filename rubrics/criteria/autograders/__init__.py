"""Weighted-criteria autograders (per criterion, one shot, holistic), drop-in compatible with the public
``rubric`` library's generate functions and output schemas."""

from rubrics.criteria.autograders.graders import (
    Autograder,
    GenerateFn,
    PerCriterionGrader,
    PerCriterionOneShotGrader,
    RubricAsJudgeGrader,
    judge_generate_fn,
)
from rubrics.criteria.autograders.schemas import (
    CriterionEvaluation,
    GraderOutputError,
    OneShotOutput,
    PerCriterionOutput,
    RubricAsJudgeOutput,
)
from rubrics.criteria.autograders.scoring import holistic_score, per_criterion_score

__all__ = [
    "Autograder",
    "CriterionEvaluation",
    "GenerateFn",
    "GraderOutputError",
    "OneShotOutput",
    "PerCriterionGrader",
    "PerCriterionOneShotGrader",
    "PerCriterionOutput",
    "RubricAsJudgeGrader",
    "RubricAsJudgeOutput",
    "holistic_score",
    "judge_generate_fn",
    "per_criterion_score",
]
