"""The plan: routes through the DAG, every branch key covered, stable ids, weighting, bounds."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from envs.synth.plan import Plan, enumerate_routes, make_plan
from rubrics.multistep.rubric_io import load_rubric, rubric_to_dict
from rubrics.multistep.walk import ground_truth_walk
from tests.envs.synth.helpers import ROADSIDE

FIRST_RESPONDER = Path(__file__).parents[3] / "configs" / "rubrics" / "first_responder.yaml"


def _plan(path: Path, n: int, **kw: object) -> Plan:
    rubric = load_rubric(path)
    return make_plan(rubric.graph, rubric_to_dict(rubric), n, **kw)  # type: ignore[arg-type]


def test_roadside_routes_follow_the_dag() -> None:
    rubric = load_rubric(ROADSIDE)
    routes, truncated = enumerate_routes(rubric.graph)
    # scene_safe=1 -> conscious in {0, 1}; scene_safe=0 -> hazard (one branch: all unlock conscious) -> conscious
    assert len(routes) == 4 and not truncated
    for route in routes:
        answers = {b.requirement: b.answers[0] for b in route}
        walk = ground_truth_walk(rubric.graph, answers)
        assert set(walk.path) == set(answers) and walk.stop_reason == "terminal"


@pytest.mark.parametrize("path", [ROADSIDE, FIRST_RESPONDER])
def test_enough_items_cover_every_branch_key(path: Path) -> None:
    rubric = load_rubric(path)
    small = _plan(path, 1)
    n = 40
    plan = _plan(path, n)
    assert len(plan.items) == n and len({i.id for i in plan.items}) == n
    covered = {(name, float(a)) for item in plan.items for name, a in item.answers.items()}
    for key in plan.branch_keys:
        name, answers = key.split("=")
        assert any((name, float(a)) in covered for a in answers.split("|")), key
    # every planned answer is on a real ground-truth walk
    for item in plan.items:
        walk = ground_truth_walk(rubric.graph, item.answers)
        assert set(walk.path) == set(item.answers) and walk.stop_reason == "terminal"
        if item.wrong:
            req = rubric.graph.requirements[item.wrong["requirement"]]
            assert req.route(item.wrong["answer"]) != req.route(item.answers[req.name])
    assert small.branch_keys == plan.branch_keys


def test_plan_is_deterministic_and_seeded() -> None:
    a, b, c = _plan(ROADSIDE, 12, seed=3), _plan(ROADSIDE, 12, seed=3), _plan(ROADSIDE, 12, seed=4)
    assert a.to_dict() == b.to_dict()
    assert [i.answers for i in a.items] != [i.answers for i in c.items]
    assert Plan.from_dict(a.to_dict()) == a


def test_answers_within_a_branch_rotate() -> None:
    plan = _plan(ROADSIDE, 12)
    hazard = Counter(item.answers["hazard"] for item in plan.items if "hazard" in item.answers)
    assert set(hazard) == {0.0, 1.0, 2.0}  # one branch, every option used
    assert max(hazard.values()) - min(hazard.values()) <= 1


def test_balanced_weighting_evens_out_branches() -> None:
    plan = _plan(FIRST_RESPONDER, 60, weighting="balanced")
    safe = Counter(item.answers["scene_safety"] for item in plan.items)
    assert abs(safe[0.0] - safe[1.0]) <= 6


def test_bounded_enumeration_and_bad_arguments() -> None:
    rubric = load_rubric(FIRST_RESPONDER)
    routes, truncated = enumerate_routes(rubric.graph, max_routes=5)
    assert len(routes) == 5 and truncated
    with pytest.raises(ValueError, match="n must be"):
        _plan(ROADSIDE, 0)
    with pytest.raises(ValueError, match="weighting"):
        _plan(ROADSIDE, 2, weighting="zipf")
