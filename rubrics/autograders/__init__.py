"""The seed API's import path of the weighted-criteria autograders (``from rubric.autograders import
PerCriterionGrader, ...`` in the source documents): kept so that code written against it runs unchanged.
The graders live in ``rubrics.criteria.autograders``; import them from there in new code."""

from rubrics.criteria.autograders import (
    Autograder,
    CriterionEvaluation,
    GenerateFn,
    GraderOutputError,
    OneShotOutput,
    PerCriterionGrader,
    PerCriterionOneShotGrader,
    PerCriterionOutput,
    RubricAsJudgeGrader,
    RubricAsJudgeOutput,
    holistic_score,
    judge_generate_fn,
    per_criterion_score,
)

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
