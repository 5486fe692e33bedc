"""Walking the DAG: advancing on correct judgments, concurrency per frontier, reveals (``Walk.advance``),
stop reasons, metrics."""

from __future__ import annotations

import json
import math

import pytest

from rubrics import RubricGroup
from rubrics.multistep import BinaryRequirement, MultiStepRubric, Requirement, Scenario, ground_truth_walk
from rubrics.multistep.walk import STOP_REASONS, EvaluationResult, Walk
from rubrics.rubric import Rubric
from rubrics.types import StopReason

from .helpers import ScriptedJudge, quickstart_requirements, rule_judges

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
    rubric = MultiStepRubric(quickstart_requirements(), rule_judges())
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
    rubric = MultiStepRubric(quickstart_requirements(), [judge])
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
        quickstart_requirements(), [judge], reward_strategy={"type": "sum", "normalized": False}
    )
    result = await rubric.evaluate(answers, "reply")
    assert [(r.name, r.correct) for r in result.results] == [
        ("scene_safety", True),
        ("patient_consciousness", False),
    ]
    assert result.stop_reason == "incorrect" and result.depth == 1
    assert rubric.reward(result, answers) == 1.0


async def test_no_verdict_is_incorrect_not_an_error() -> None:
    rubric = MultiStepRubric(quickstart_requirements(), rule_judges())
    state = {"completion": "I have no idea.", "answer": SEED_SCENARIO.answers}
    await rubric.score_rollout(state)
    assert "error" not in state and state["reward"] == 0.0
    assert state["multistep"].results[0].answer is None


async def test_missing_ground_truth_stops_with_its_reason() -> None:
    judge = ScriptedJudge({"scene_safety": 1.0})
    rubric = MultiStepRubric(quickstart_requirements(), [judge])
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
    rubric = MultiStepRubric(quickstart_requirements(), [judge])
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
    rubric = MultiStepRubric(quickstart_requirements(), [judge])
    state = SEED_SCENARIO.to_state()
    await rubric.score_rollout(state)
    calls = len(judge.calls)
    state["completion"] = "something else entirely"
    await rubric.score_rollout(state)
    assert len(judge.calls) == calls == 3
    assert state["reward"] == pytest.approx(1.0)


async def test_multistep_rubric_inside_a_group() -> None:
    rubric = MultiStepRubric(quickstart_requirements(), rule_judges())
    brevity = Rubric(funcs=[lambda completion, **kw: 1.0 if len(completion) < 80 else 0.0], weights=[0.1])
    group = RubricGroup([rubric, brevity])
    states = [SEED_SCENARIO.to_state(), {**SEED_SCENARIO.to_state(), "completion": "I rush in."}]
    await group.score_group(states)
    # first: full path (1.0) + brevity 0.1; second: scene_safety judged 0.0 vs truth 1.0 -> 0.0 + 0.1
    assert [s["reward"] for s in states] == [pytest.approx(1.1), pytest.approx(0.1)]
    assert [s["advantage"] for s in states] == [pytest.approx(0.5), pytest.approx(-0.5)]


# -- Walk.advance: one reply at a time -------------------------------------------------------------------


def reveal_requirements() -> list[Requirement]:
    """safety -> vitals -> {oxygen, position}; oxygen -> transport. Reveals on safety and vitals."""
    return [
        BinaryRequirement(name="safety", question="?", dependencies={1.0: ["vitals"]}),
        BinaryRequirement(name="vitals", question="?", dependencies={1.0: ["oxygen", "position"]}),
        BinaryRequirement(name="oxygen", question="?", dependencies={1.0: ["transport"]}),
        BinaryRequirement(name="position", question="?"),
        BinaryRequirement(name="transport", question="?"),
    ]


REVEAL_ANSWERS = {n: {"answer": 1.0} for n in ("safety", "vitals", "oxygen", "position", "transport")}
REVEALS = {"safety": "You reach him.", "vitals": "Pulse 120.", "transport": "never shown: unlocks nothing"}


def reveal_walk(judge: ScriptedJudge, answers: dict | None = None) -> Walk:
    rubric = MultiStepRubric(reveal_requirements(), [judge])
    return rubric.walk(REVEAL_ANSWERS if answers is None else answers, REVEALS)


async def test_a_reveal_makes_what_it_unlocks_wait_for_the_next_reply() -> None:
    judge = ScriptedJudge(dict.fromkeys(REVEAL_ANSWERS, 1.0))
    walk = reveal_walk(judge)
    first = await walk.advance("prompt", "reply 1", turn=1)
    assert [r.name for r in first.results] == ["safety"] and first.reveals == ["You reach him."]
    assert first.stop_reason is None and not first.done and walk.frontier == ["vitals"]
    second = await walk.advance("prompt", "reply 2", turn=2)
    assert [r.name for r in second.results] == ["vitals"] and second.reveals == ["Pulse 120."]
    assert walk.frontier == ["oxygen", "position"]
    # oxygen has no reveal: transport is judged on the same reply; transport's text unlocks nothing, unshown
    third = await walk.advance("prompt", "reply 3", turn=3)
    assert [(r.name, r.turn) for r in third.results] == [("oxygen", 3), ("position", 3), ("transport", 3)]
    assert third.reveals == [] and third.done and third.stop_reason == StopReason.TERMINAL
    assert walk.done and walk.result.path == list(REVEAL_ANSWERS) and judge.calls == list(REVEAL_ANSWERS)
    again = await walk.advance("prompt", "reply 4", turn=4)  # a done walk judges nothing more
    assert again.results == [] and again.stop_reason == StopReason.TERMINAL and len(judge.calls) == 5


async def test_without_reveals_one_advance_walks_the_whole_dag() -> None:
    judge = ScriptedJudge(dict.fromkeys(REVEAL_ANSWERS, 1.0))
    walk = MultiStepRubric(reveal_requirements(), [judge]).walk(REVEAL_ANSWERS)
    step = await walk.advance("prompt", "reply")
    assert [r.name for r in step.results] == list(REVEAL_ANSWERS) and step.reveals == []
    assert step.stop_reason == StopReason.TERMINAL
    expected = [r.name for r in (await evaluate_reply(judge, "reply")).results]
    assert [r.name for r in step.results] == expected


async def evaluate_reply(judge: ScriptedJudge, reply: str) -> EvaluationResult:
    return await MultiStepRubric(reveal_requirements(), [judge]).evaluate(REVEAL_ANSWERS, reply)


async def test_an_incorrect_verdict_closes_only_its_branch() -> None:
    judge = ScriptedJudge({"safety": 1.0, "vitals": 1.0, "oxygen": 0.0, "position": 1.0})
    walk = reveal_walk(judge)
    await walk.advance("p", "r1", 1)
    await walk.advance("p", "r2", 2)
    last = await walk.advance("p", "r3", 3)
    # oxygen judged 0.0 against truth 1.0: its branch (transport) closes; position is still judged
    assert [(r.name, r.correct) for r in last.results] == [("oxygen", False), ("position", True)]
    assert last.stop_reason == StopReason.INCORRECT == walk.result.stop_reason
    assert "transport" not in judge.calls


async def test_no_verdict_on_a_revealing_requirement_reveals_nothing() -> None:
    walk = reveal_walk(ScriptedJudge({"safety": None}))
    step = await walk.advance("p", "r1", 1)
    assert step.reveals == [] and step.stop_reason == StopReason.INCORRECT
    assert step.results[0].answer is None and not step.results[0].correct


async def test_missing_ground_truth_is_never_judged_and_named_as_the_stop_reason() -> None:
    judge = ScriptedJudge(dict.fromkeys(REVEAL_ANSWERS, 1.0))
    answers = {k: v for k, v in REVEAL_ANSWERS.items() if k != "position"}
    walk = reveal_walk(judge, answers)
    await walk.advance("p", "r1", 1)
    await walk.advance("p", "r2", 2)
    last = await walk.advance("p", "r3", 3)
    assert [r.name for r in last.results] == ["oxygen", "transport"] and "position" not in judge.calls
    assert last.stop_reason == StopReason.MISSING_GROUND_TRUTH


async def test_a_requirement_also_unlocked_by_a_reveal_waits_for_its_text() -> None:
    """z is unlocked by a plain parent (b) and a revealing one (a): it is judged on the reply after a's
    text (which may hold what z asks about, e.g. the vital signs), while y (b's alone) is judged at once."""
    reqs = [
        BinaryRequirement(name="r", question="?", dependencies={1.0: ["a", "b"]}),
        BinaryRequirement(name="a", question="?", dependencies={1.0: ["z"]}),  # reveals
        BinaryRequirement(name="b", question="?", dependencies={1.0: ["z", "y"]}),  # plain
        BinaryRequirement(name="y", question="?"),
        BinaryRequirement(name="z", question="?"),
    ]
    judge = ScriptedJudge(dict.fromkeys("rabyz", 1.0))
    walk = MultiStepRubric(reqs, [judge]).walk({n: 1.0 for n in "rabyz"}, {"a": "A's news"})
    step = await walk.advance("p", "reply 1", turn=1)
    assert [r.name for r in step.results] == ["r", "a", "b", "y"]
    assert step.reveals == ["A's news"] and step.stop_reason is None and walk.frontier == ["z"]
    last = await walk.advance("p", "reply 2", turn=2)
    assert [(r.name, r.turn) for r in last.results] == [("z", 2)] and last.stop_reason == StopReason.TERMINAL


def test_stop_reasons_are_plain_strings_in_data() -> None:
    assert set(STOP_REASONS) == {"terminal", "incorrect", "missing_ground_truth"}
    result = EvaluationResult(stop_reason=StopReason.MAX_TURNS)
    data = result.to_dict()
    assert (
        type(data["stop_reason"]) is str and json.dumps(data) == '{"results": [], "stop_reason": "max_turns"}'
    )
    assert EvaluationResult.from_dict(data).stop_reason is StopReason.MAX_TURNS
    assert f"stop/{StopReason.TOKEN_BUDGET}" == "stop/token_budget"
    with pytest.raises(ValueError, match="not_a_reason"):
        EvaluationResult.from_dict({"stop_reason": "not_a_reason"})


def test_ground_truth_walk_follows_the_scenario_answers() -> None:
    rubric = MultiStepRubric(quickstart_requirements(), rule_judges())
    answers = {
        "scene_safety": {"answer": 1.0},
        "patient_consciousness": {"answer": 0.0},
        "airway_management": {"answer": 1.0},
        "communication": {"answer": 1.0},  # off the ground-truth path: never reached
    }
    best = ground_truth_walk(rubric.graph, answers)
    assert best.path == ["scene_safety", "patient_consciousness", "airway_management"]
    second = best.results[1]
    assert second.answer == second.truth == 0.0 and second.correct and second.reasoning == "ground truth"
    assert best.stop_reason == StopReason.TERMINAL
    missing = ground_truth_walk(rubric.graph, {"scene_safety": {"answer": 1.0}})
    assert missing.path == ["scene_safety"] and missing.stop_reason == StopReason.MISSING_GROUND_TRUTH
