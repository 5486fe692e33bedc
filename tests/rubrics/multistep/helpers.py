"""Small rubrics and a scripted judge for multi-step tests."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from rubrics.judges.base import Judge
from rubrics.judges.formats import JudgeResponse
from rubrics.multistep import BinaryRequirement, Requirement, RuleRequirementJudge


class ScriptedJudge:
    """Answers each requirement from a table (name -> answer); records calls and peak concurrency."""

    def __init__(self, table: Mapping[str, Any], name: str = "scripted", delay_s: float = 0.0) -> None:
        self.table = dict(table)
        self.name = name
        self.delay_s = delay_s
        self.calls: list[str] = []
        self.in_flight = 0
        self.peak = 0

    def cannot_answer(self, requirement: Requirement) -> str | None:
        return None

    def judge_for(self, requirement: Requirement) -> Judge:
        return _Scripted(self, requirement)

    async def answer(self, requirement: Requirement) -> JudgeResponse:
        """The table's answer for ``requirement``, after ``delay_s`` (an exception in the table is raised)."""
        self.calls.append(requirement.name)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            value = self.table.get(requirement.name)
            if isinstance(value, Exception):
                raise value
            return JudgeResponse(answer=value, reasoning=f"scripted {value!r}")
        finally:
            self.in_flight -= 1

    def to_dict(self) -> dict[str, Any]:
        return {"type": "scripted"}


class _Scripted:
    """A ``ScriptedJudge``'s judge of one requirement."""

    def __init__(self, owner: ScriptedJudge, requirement: Requirement) -> None:
        self.owner, self.requirement = owner, requirement
        self.name, self.response_format = requirement.name, requirement.response_format

    async def __call__(
        self, prompt: Any, completion: Any, answer: Any = None, state: Any = None
    ) -> JudgeResponse:
        return await self.owner.answer(self.requirement)


def quickstart_requirements() -> list[Requirement]:
    """The multi-step quick-start workflow, with rules so it also runs with the rule judge."""
    return [
        BinaryRequirement(
            name="scene_safety",
            question="Does the response prioritize scene safety before approaching?",
            dependencies={1.0: ["patient_consciousness"], 0.0: []},
            rules={1.0: {"any": ["confirm safety", "scene is safe"]}, 0.0: {"any": ["rush in"]}},
        ),
        BinaryRequirement(
            name="patient_consciousness",
            question="Does the response assess if the patient is conscious?",
            dependencies={1.0: ["communication"], 0.0: ["airway_management"]},
            rules={1.0: {"any": ["speak to the patient"]}, 0.0: {"any": ["unresponsive"]}},
        ),
        BinaryRequirement(
            name="communication",
            question="Do they communicate with the patient?",
            rules={1.0: {"any": ["speak to the patient", "reassure"]}},
        ),
        BinaryRequirement(
            name="airway_management",
            question="Do they secure the airway?",
            rules={1.0: {"any": ["open the airway", "jaw thrust"]}},
        ),
    ]


def rule_judges() -> dict[str, RuleRequirementJudge]:
    return {"rules": RuleRequirementJudge()}
