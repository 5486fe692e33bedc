"""Walking the DAG: advancing on correct judgments, concurrency per frontier, stop reasons, metrics."""

from __future__ import annotations

import math

import pytest

from rubrics import RubricGroup
from rubrics.multistep import BinaryRequirement, MultiStepRubric, Scenario
from rubrics.rubric import Rubric

from .helpers import ScriptedJudge, rule_judges, seed_requirements

SEED_SCENARIO = Scenario(
    prompt="You arrive at a minor crash; the scene is safe.",
    completion="I confirm safety, speak to the patient, and proceed.",
    answers={
        "scene_safety": {"answer": 1.0},
        "patient_consciousness": {"answer": 1.0},
        "communication": {"answer": 1.0},
    },
)


async def test_seed_quick_start_with_rule_judge() -> None:
    rubric = MultiStepRubric(seed_requirements(), rule_judges())
    SEED_SCENARIO.validate(rubric)
    result = await rubric.evaluate(SEED_SCENARIO, SEED_SCENARIO.completion)
    # "confirm safety" -> scene_safety 1.0 (correct) -> patient_consciousness: "speak to the patient" -> 1.0
    # (correct) -> communication: 1.0 (correct, terminal)
    assert result.path == ["scene_safety", "patient_consciousness", "communication"]
    assert [r.level for r in result.results] == [0, 1, 2]
    assert result.depth == 3 and result.stop_reason == "terminal"
    state = SEED_SCENARIO.to_state()
    await rubric.score_rollout(state)
    assert state["reward"] == pytest.approx(1.0)  # the whole ground-truth path, normalised
    assert state["metrics"]["req/communication"] == 1.0
    assert state["metrics"]["depth"] == 3.0 and state["metrics"]["stop/terminal"] == 1.0


async def test_correct_judgment_follows_the_ground_truth_branch() -> None:
    answers = {
        "scene_safety": {"answer": 1.0},
        "patient_consciousness": {"answer": 0.0},
        "airway_management": {"answer": 1.0},
    }
    judge = ScriptedJudge({"scene_safety": 1.0, "patient_consciousness": 0.0, "airway_management": 1.0})
    rubric = MultiStepRubric(seed_requirements(), [judge])
    result = await rubric.evaluate(answers, "reply")
    assert result.path == ["scene_safety", "patient_consciousness", "airway_management"]
    assert "communication" not in judge.calls


async def test_incorrect_judgment_closes_the_branch() -> None:
    answers = {
        "scene_safety": {"answer": 1.0},
        "patient_consciousness": {"answer": 1.0},
        "communication": {"answer": 1.0},
    }
    judge = ScriptedJudge({"scene_safety": 1.0, "patient_consciousness": 0.0})
    rubric = MultiStepRubric(
        seed_requirements(), [judge], reward_strategy={"type": "sum", "normalized": False}
    )
    result = await rubric.evaluate(answers, "reply")
    assert [(r.name, r.correct) for r in result.results] == [
        ("scene_safety", True),
        ("patient_consciousness", False),
    ]
    assert result.stop_reason == "incorrect" and result.depth == 1
    assert rubric.reward(result, answers) == 1.0


async def test_no_verdict_is_incorrect_not_an_error() -> None:
    rubric = MultiStepRubric(seed_requirements(), rule_judges())
    state = {"completion": "I have no idea.", "answer": SEED_SCENARIO.answers}
    await rubric.score_rollout(state)
    assert "error" not in state and state["reward"] == 0.0
    assert state["multistep"]["results"][0]["answer"] is None


async def test_missing_ground_truth_stops_with_its_reason() -> None:
    judge = ScriptedJudge({"scene_safety": 1.0})
    rubric = MultiStepRubric(seed_requirements(), [judge])
    result = await rubric.evaluate({"scene_safety": {"answer": 1.0}}, "reply")
    assert result.stop_reason == "missing_ground_truth" and result.path == ["scene_safety"]


async def test_frontier_is_judged_concurrently_and_a_diamond_once() -> None:
    reqs = [
        BinaryRequirement(name="r", question="?", dependencies={1.0: ["a", "b", "c"]}),
        BinaryRequirement(name="a", question="?", dependencies={1.0: ["z"]}),
        BinaryRequirement(name="b", question="?", dependencies={1.0: ["z"]}),
        BinaryRequirement(name="c", question="?"),
        BinaryRequirement(name="z", question="?"),
    ]
    judge = ScriptedJudge(dict.fromkeys("rabcz", 1.0), delay_s=0.05)
    rubric = MultiStepRubric(reqs, [judge])
    result = await rubric.evaluate({n: {"answer": 1.0} for n in "rabcz"}, "reply")
    assert judge.peak == 3  # a, b and c in flight together
    assert judge.calls.count("z") == 1
    assert result.path == ["r", "a", "b", "c", "z"]


async def test_judge_failure_marks_the_rollout() -> None:
    judge = ScriptedJudge({"scene_safety": RuntimeError("judge endpoint gone after 5 attempts")})
    rubric = MultiStepRubric(seed_requirements(), [judge])
    states = [
        {"completion": "x", "answer": SEED_SCENARIO.answers},
        {"completion": "y", "answer": SEED_SCENARIO.answers},
    ]
    await rubric.score_group(states)
    for s in states:
        assert "judge endpoint gone" in s["error"] and math.isnan(s["reward"])
        assert s["metrics"]["errors/multistep_reward"] == 1.0


async def test_prejudged_verdicts_are_reused() -> None:
    judge = ScriptedJudge({"scene_safety": 1.0, "patient_consciousness": 1.0, "communication": 1.0})
    rubric = MultiStepRubric(seed_requirements(), [judge])
    state = SEED_SCENARIO.to_state()
    await rubric.score_rollout(state)
    calls = len(judge.calls)
    state["completion"] = "something else entirely"
    await rubric.score_rollout(state)
    assert len(judge.calls) == calls == 3
    assert state["reward"] == pytest.approx(1.0)


async def test_multistep_rubric_inside_a_group() -> None:
    rubric = MultiStepRubric(seed_requirements(), rule_judges())
    brevity = Rubric(funcs=[lambda completion, **kw: 1.0 if len(completion) < 80 else 0.0], weights=[0.1])
    group = RubricGroup([rubric, brevity])
    states = [SEED_SCENARIO.to_state(), {**SEED_SCENARIO.to_state(), "completion": "I rush in."}]
    await group.score_group(states)
    # first: full path (1.0) + brevity 0.1; second: scene_safety judged 0.0 vs truth 1.0 -> 0.0 + 0.1
    assert [s["reward"] for s in states] == [pytest.approx(1.1), pytest.approx(0.1)]
    assert [s["advantage"] for s in states] == [pytest.approx(0.5), pytest.approx(-0.5)]
