"""Requirements and DAG validation: each refusal names the requirement and the field."""

from __future__ import annotations

import logging

import pytest

from rubrics.multistep import (
    BinaryRequirement,
    ContinuousRequirement,
    DiscreteRequirement,
    MultiStepRubric,
    RubricValidationError,
    UnitVectorRequirement,
    build_graph,
)

from .helpers import ScriptedJudge, quickstart_requirements, rule_judges


def B(name: str, deps: dict | None = None, **kw) -> BinaryRequirement:
    return BinaryRequirement(name=name, question=f"{name}?", dependencies=deps or {}, **kw)


def test_seed_quick_start_structure() -> None:
    rubric = MultiStepRubric(quickstart_requirements(), rule_judges())
    assert rubric.roots == ["scene_safety"]
    assert rubric.levels == [
        ["scene_safety"],
        ["patient_consciousness"],
        ["communication", "airway_management"],
    ]
    assert rubric.paths() == [
        ["scene_safety", "patient_consciousness", "airway_management"],
        ["scene_safety", "patient_consciousness", "communication"],
    ]
    assert all(isinstance(level, int) for level in rubric.graph.levels.values())


def test_seed_branching_requirement() -> None:
    scene_safety = BinaryRequirement(
        name="scene_safety",
        question="Does the responder confirm scene safety first?",
        dependencies={1.0: ["communicate"], 0.0: ["airway"]},
    )
    assert scene_safety.route(1.0) == ["communicate"] and scene_safety.route(0.0) == ["airway"]
    assert scene_safety.children() == ["airway", "communicate"]


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(
        RubricValidationError, match=r"requirement 'a': field 'name' is duplicated \(requirements\[1\]\)"
    ):
        MultiStepRubric([B("a"), B("a")], [ScriptedJudge({})])


def test_unknown_dependency_is_refused() -> None:
    with pytest.raises(
        RubricValidationError,
        match=r"requirement 'a': field 'dependencies' \(1.0\) names unknown requirement 'ghost'",
    ):
        MultiStepRubric([B("a", {1.0: ["ghost"]})], [ScriptedJudge({})])


def test_cycle_is_refused_and_shown() -> None:
    reqs = [B("root", {1.0: ["a"]}), B("a", {1.0: ["b"]}), B("b", {0.0: ["c"]}), B("c", {1.0: ["a"]})]
    with pytest.raises(RubricValidationError, match=r"closes a cycle: a -> b -> c -> a"):
        MultiStepRubric(reqs, [ScriptedJudge({})])
    with pytest.raises(RubricValidationError, match=r"names itself \(cycle: a -> a\)"):
        MultiStepRubric([B("a", {1.0: ["a"]})], [ScriptedJudge({})])


def test_dependency_key_outside_the_domain_is_refused() -> None:
    with pytest.raises(
        ValueError,
        match=r"requirement 'a': field 'dependencies' has a key outside the answer domain \(expected .*, got 2.0\)",
    ):
        B("a", {2.0: []})
    with pytest.raises(
        ValueError, match=r"requirement 'd': field 'dependencies' has a key outside .*got 3\)"
    ):
        DiscreteRequirement(name="d", question="?", options={0: "low", 1: "high"}, dependencies={3: []})
    with pytest.raises(
        ValueError, match=r"requirement 'c': field 'dependencies' has a key outside .*got 7\)"
    ):
        ContinuousRequirement(name="c", question="?", low=0, high=5, dependencies={7: []})
    with pytest.raises(
        ValueError,
        match=r"requirement 'u': field 'dependencies' has a key outside .*label index 0..1, got 2\)",
    ):
        UnitVectorRequirement(name="u", question="?", labels=["x", "y"], dependencies={2: []})


def test_requirement_no_judge_can_answer_is_refused() -> None:
    with pytest.raises(
        RubricValidationError,
        match=r"requirement 'a': field 'judge': judge 'rules' cannot answer .*no 'rules'",
    ):
        MultiStepRubric([B("a")], rule_judges())
    uv = UnitVectorRequirement(name="u", question="?", labels=["x", "y"], rules={0: {"any": ["x"]}})
    with pytest.raises(RubricValidationError, match=r"requirement 'u'.*cannot produce a probability vector"):
        MultiStepRubric([uv], rule_judges())
    with pytest.raises(
        RubricValidationError, match=r"requirement 'a': field 'judge' names unknown judge 'llm'"
    ):
        MultiStepRubric([B("a", judge="llm")], [ScriptedJudge({})])
    with pytest.raises(RubricValidationError, match="at least one judge"):
        MultiStepRubric([B("a")], [])


def test_malformed_rules_are_refused() -> None:
    bad = B("a", rules={1.0: {"anyy": ["x"]}})
    with pytest.raises(
        RubricValidationError, match=r"requirement 'a': field 'rules' \(1.0\) has unknown key 'anyy'"
    ):
        MultiStepRubric([bad], rule_judges())
    bad_regex = B("a", rules={1.0: {"regex": "(unclosed"}})
    with pytest.raises(RubricValidationError, match=r"'regex' does not compile"):
        MultiStepRubric([bad_regex], rule_judges())


def test_unreachable_requirements_are_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        rubric = MultiStepRubric(
            [B("a", {1.0: ["b"]}), B("b"), B("island")], [ScriptedJudge({})], roots=["a"]
        )
    assert rubric.graph.unreachable == ("island",)
    assert "unreachable" in caplog.text and "island" in caplog.text


def test_levels_are_longest_chains_in_a_diamond() -> None:
    reqs = [
        B("r", {1.0: ["x", "y"]}),
        B("x", {1.0: ["z"]}),
        B("y", {1.0: ["w"]}),
        B("w", {1.0: ["z"]}),
        B("z"),
    ]
    rubric = MultiStepRubric(reqs, [ScriptedJudge({})])
    assert rubric.graph.levels == {"r": 0, "x": 1, "y": 1, "w": 2, "z": 3}
    assert sorted(rubric.paths()) == [["r", "x", "z"], ["r", "y", "w", "z"]]


def test_continuous_routes_to_the_nearest_key_ties_to_the_smaller() -> None:
    c = ContinuousRequirement(
        name="severity",
        question="How severe (0-10)?",
        low=0,
        high=10,
        dependencies={0: ["a"], 5: ["b"], 10: ["c"]},
    )
    assert c.route(1.9) == ["a"]
    assert c.route(2.5) == ["a"]  # equidistant from 0 and 5: the smaller key
    assert c.route(2.6) == ["b"]
    assert c.route(9.0) == ["c"]
    assert c.is_correct(7.05, 7.0) and not c.is_correct(7.2, 7.0)  # tolerance 0.1


def test_unit_vector_routes_by_top_label() -> None:
    u = UnitVectorRequirement(
        name="u", question="?", labels=["cardiac", "stroke", "other"], dependencies={1: ["s"]}
    )
    assert u.route([0.1, 0.7, 0.2]) == ["s"] and u.route([0.6, 0.3, 0.1]) == []
    assert u.is_correct([0.2, 0.5, 0.3], [0.0, 1.0, 0.0])


def _chain(n: int, close: bool = False) -> list[BinaryRequirement]:
    """r0 -> r1 -> ... -> r{n-1} (-> r0 when ``close``)."""
    reqs = []
    for i in range(n):
        nxt = f"r{i + 1}" if i + 1 < n else ("r0" if close else None)
        deps = {1.0: [nxt]} if nxt else {}
        reqs.append(BinaryRequirement(name=f"r{i}", question="?", dependencies=deps))
    return reqs


def test_a_long_chain_validates_and_a_long_cycle_is_reported_in_short() -> None:
    graph = build_graph(_chain(5000))  # recursion would stop at about a thousand levels
    assert graph.depth == 5000 and graph.count_paths() == 1 and len(graph.paths()[0]) == 5000
    with pytest.raises(RubricValidationError) as err:
        build_graph(_chain(5000, close=True))
    message = str(err.value)
    assert message == (
        "requirement 'r4999': field 'dependencies' closes a cycle: "
        "r0 -> r1 -> r2 -> r3 -> ... -> r4997 -> r4998 -> r4999 -> r0 (5000 requirements)"
    )


def test_paths_of_a_wide_dag_are_counted_and_their_listing_bounded() -> None:
    levels = 40  # two requirements per level, each unlocking both of the next: 2**40 paths
    reqs = []
    for i in range(levels):
        nxt = [f"a{i + 1}", f"b{i + 1}"] if i + 1 < levels else []
        for side in "ab":
            reqs.append(
                BinaryRequirement(name=f"{side}{i}", question="?", dependencies={1.0: nxt} if nxt else {})
            )
    graph = build_graph(reqs)
    assert graph.count_paths() == 2**40
    first = graph.paths(limit=3)
    assert first == [
        [f"a{i}" for i in range(levels)],
        [*(f"a{i}" for i in range(levels - 1)), f"b{levels - 1}"],
        [*(f"a{i}" for i in range(levels - 2)), f"b{levels - 2}", f"a{levels - 1}"],
    ]
