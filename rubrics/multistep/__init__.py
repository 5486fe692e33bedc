"""Multi-step branching rubrics: requirements wired as a DAG whose next steps depend on the judged answer."""

from rubrics.multistep.dag import Graph, RubricValidationError, build_graph
from rubrics.multistep.judging import LLMRequirementJudge, RequirementJudge, RuleRequirementJudge
from rubrics.multistep.requirements import (
    BinaryRequirement,
    ContinuousRequirement,
    DiscreteRequirement,
    Requirement,
    UnitVectorRequirement,
)
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.rubric_io import (
    RubricFileError,
    load_rubric,
    load_scenarios,
    rubric_from_dict,
    rubric_to_dict,
    save_rubric,
    save_scenarios,
)
from rubrics.multistep.scenario import Scenario
from rubrics.multistep.strategies import STRATEGIES, RewardStrategy
from rubrics.multistep.walk import (
    Advance,
    EvaluationResult,
    RequirementResult,
    Walk,
    evaluate,
    ground_truth_walk,
)

__all__ = [
    "STRATEGIES",
    "Advance",
    "BinaryRequirement",
    "ContinuousRequirement",
    "DiscreteRequirement",
    "EvaluationResult",
    "Graph",
    "LLMRequirementJudge",
    "MultiStepRubric",
    "Requirement",
    "RequirementJudge",
    "RequirementResult",
    "RewardStrategy",
    "RubricFileError",
    "RubricValidationError",
    "RuleRequirementJudge",
    "Scenario",
    "UnitVectorRequirement",
    "Walk",
    "build_graph",
    "evaluate",
    "ground_truth_walk",
    "load_rubric",
    "load_scenarios",
    "rubric_from_dict",
    "rubric_to_dict",
    "save_rubric",
    "save_scenarios",
]
