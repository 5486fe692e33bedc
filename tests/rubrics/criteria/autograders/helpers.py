"""Shared by the autograder tests: the weighted-criteria example, a per-criterion generate function that
answers from a table, and the per-criterion score."""

from __future__ import annotations

import re
from typing import Any

from rubrics.criteria.autograders import (
    PerCriterionOutput,
    per_criterion_score,
)
from rubrics.criteria.rubric import CriteriaRubric

EXAMPLE_CRITERIA = CriteriaRubric.from_dict(
    [
        {"weight": 10.0, "requirement": "States Q4 2023 base margin as 17.2%"},
        {"weight": 8.0, "requirement": "Explicitly uses Shapley attribution for decomposition"},
        {"weight": -15.0, "requirement": "Uses total deliveries instead of cash-only deliveries"},
    ]
)


def verdicts_by_requirement(met: dict[str, bool]) -> Any:
    """A per-criterion generate_fn that reads the <criterion> tag and answers from ``met``."""

    def generate(system_prompt: str, user_prompt: str) -> PerCriterionOutput:
        requirement = re.search(r"<criterion>\n(.*?)\n</criterion>", user_prompt, re.DOTALL)
        assert requirement is not None
        status = "MET" if met[requirement.group(1)] else "UNMET"
        return PerCriterionOutput.model_validate(
            {"explanation": f"judged {status}", "criterion_status": status}
        )

    return generate


def per_criterion(weights: list[float], met: list[bool], normalize: bool = True) -> tuple[float, float]:
    return per_criterion_score(weights, met, normalize)
