"""YAML in and out: lossless round trips, a corpus of malformed files, and random DAGs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rubrics.judges.endpoint import JudgeEndpoint
from rubrics.multistep import (
    BinaryRequirement,
    ContinuousRequirement,
    DiscreteRequirement,
    LLMRequirementJudge,
    MultiStepRubric,
    RubricFileError,
    RuleRequirementJudge,
    Scenario,
    UnitVectorRequirement,
    load_rubric,
    load_scenarios,
    rubric_from_dict,
    rubric_to_dict,
    save_rubric,
    save_scenarios,
)

from .helpers import ScriptedJudge, quickstart_requirements, rule_judges

MALFORMED = Path(__file__).parent / "malformed"


def every_kind_rubric(strategy: dict) -> MultiStepRubric:
    reqs = [
        BinaryRequirement(
            name="root",
            question="Root?",
            dependencies={1.0: ["pain", "vector"], 0.0: ["severity"]},
            rules={1.0: {"any": ["yes indeed"], "none": ["no"]}, 0.0: {"regex": r"\bno\b"}},
        ),
        DiscreteRequirement(
            name="pain",
            question="Pain level?",
            options={0: "none", 1: "mild", 2: "severe"},
            dependencies={2: ["severity"]},
            judge="llm",
        ),
        ContinuousRequirement(
            name="severity", question="Severity?", low=0, high=10, tolerance=0.5, judge="llm"
        ),
        UnitVectorRequirement(
            name="vector", question="Which?", labels=["a", "b"], dependencies={0: []}, judge="llm"
        ),
    ]
    judges = {
        "rules": RuleRequirementJudge(),
        "llm": LLMRequirementJudge(
            "llm",
            JudgeEndpoint(
                base_url="http://127.0.0.1:9/v1", model="judge", api_key_env="JUDGE_KEY", timeout_s=12.5
            ),
        ),
    }
    return MultiStepRubric(reqs, judges, reward_strategy=strategy, name="kinds", description="every kind")


@pytest.mark.parametrize(
    "strategy",
    [
        {"type": "level_weighted", "normalized": True, "level_bonus": 0.25},
        {"type": "progressive", "normalized": False, "growth": 3.0},
        {"type": "mean", "normalized": True},
        {"type": "sum", "normalized": False},
        {"type": "level_based", "normalized": True},
        {"type": "completion_ratio", "normalized": True},
    ],
)
def test_round_trip_is_lossless_for_every_type(tmp_path: Path, strategy: dict) -> None:
    rubric = every_kind_rubric(strategy)
    path = tmp_path / "r.yaml"
    save_rubric(rubric, path)
    loaded = load_rubric(path)
    assert rubric_to_dict(loaded) == rubric_to_dict(rubric)
    assert [type(r) for r in loaded.requirements] == [type(r) for r in rubric.requirements]
    assert loaded.requirements == rubric.requirements
    assert loaded.reward_strategy == rubric.reward_strategy
    assert loaded.judges["llm"].to_dict()["api_key_env"] == "JUDGE_KEY"
    for req in loaded.requirements:  # formats keep their type (the peer lost it for unit vectors)
        original = rubric.graph.requirements[req.name]
        assert req.response_format == original.response_format
    assert "!!" not in path.read_text()


def test_scenarios_round_trip_yaml_and_jsonl(tmp_path: Path) -> None:
    rubric = MultiStepRubric(quickstart_requirements(), rule_judges(), name="seed")
    scenarios = [
        Scenario(
            prompt="You arrive at a crash.",
            answers={
                "scene_safety": {"answer": 1, "reasoning": "no hazards"},
                "patient_consciousness": {"answer": 0},
            },
            name="s1",
            description="d",
            revealed_info={"scene_safety": "The driver is slumped over the wheel."},
            hidden_description="h",
        ),
        Scenario(prompt=[{"role": "user", "content": "Fire!"}], answers={"scene_safety": 0.0}, name="s2"),
    ]
    for s in scenarios:
        s.validate(rubric)
    assert scenarios[0].answers["scene_safety"]["answer"] == 1.0  # canonical form
    for name in ("s.yaml", "s.jsonl"):
        save_scenarios(scenarios, tmp_path / name, rubric_name="seed")
        loaded = load_scenarios(tmp_path / name, rubric)
        assert loaded == scenarios


def _corpus() -> list[Path]:
    return sorted(p for p in MALFORMED.iterdir() if p.suffix == ".yaml")


@pytest.mark.parametrize("path", _corpus(), ids=lambda p: p.stem)
def test_malformed_files_are_refused_with_file_entry_and_field(path: Path) -> None:
    expected = path.read_text().splitlines()[0].removeprefix("# expect: ")
    with pytest.raises(RubricFileError) as err:
        if path.name.startswith("scenarios"):
            load_scenarios(path, MultiStepRubric(quickstart_requirements(), rule_judges()))
        else:
            load_rubric(path)
    message = str(err.value)
    assert message.startswith(str(path)), message
    assert expected in message, message


def test_malformed_jsonl_names_the_line() -> None:
    with pytest.raises(RubricFileError, match=r"scenarios_bad_line.jsonl:2: not valid JSON"):
        load_scenarios(MALFORMED / "scenarios_bad_line.jsonl")


def test_yaml_tags_never_construct_objects(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.yaml"
    path.write_text(f'requirements: !!python/object/apply:os.system ["touch {marker}"]\n')
    with pytest.raises(RubricFileError, match="not valid YAML"):
        load_rubric(path)
    assert not marker.exists()


# -- property: random DAGs --------------------------------------------------------------------------


@st.composite
def random_dag(draw: st.DrawFn) -> tuple[list[BinaryRequirement], dict, dict]:
    n = draw(st.integers(min_value=1, max_value=9))
    names = [f"r{i}" for i in range(n)]
    reqs = []
    for i, name in enumerate(names):
        later = names[i + 1 :]  # edges only point forward: always a DAG
        deps = {}
        for key in (1.0, 0.0):
            if later and draw(st.booleans()):
                deps[key] = draw(st.lists(st.sampled_from(later), min_size=1, max_size=3, unique=True))
        reqs.append(BinaryRequirement(name=name, question=f"is {name} met?", dependencies=deps))
    truth = {name: {"answer": draw(st.sampled_from([0.0, 1.0]))} for name in names}
    judged = {name: draw(st.sampled_from([0.0, 1.0])) for name in names}
    return reqs, truth, judged


def reference_walk(reqs: list[BinaryRequirement], truth: dict, judged: dict) -> list[tuple[str, bool]]:
    """A plain breadth-first walk: judge the frontier, unlock the ground truth's branch when correct."""
    by_name = {r.name: r for r in reqs}
    has_parent = {c for r in reqs for c in r.children()}
    frontier, seen, out = [r.name for r in reqs if r.name not in has_parent], set(), []
    while frontier:
        nxt = []
        for name in frontier:
            if name in seen:
                continue
            seen.add(name)
            ok = judged[name] == truth[name]["answer"]
            out.append((name, ok))
            if ok:
                nxt += [
                    c
                    for c in by_name[name].dependencies.get(truth[name]["answer"], [])
                    if c not in seen and c not in nxt
                ]
        frontier = nxt
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dag())
def test_random_dags_round_trip_and_match_the_reference_walk(dag) -> None:
    reqs, truth, judged = dag
    rubric = MultiStepRubric(reqs, [ScriptedJudge(judged)])
    data = rubric_to_dict(rubric)
    data["judges"] = {"llm": {"type": "llm", "base_url": "http://127.0.0.1:9/v1", "model": "judge"}}
    data["default_judge"] = "llm"
    loaded = rubric_from_dict(yaml.safe_load(yaml.safe_dump(data, sort_keys=False)), "random.yaml")
    assert rubric_to_dict(loaded) == data
    assert loaded.requirements == reqs
    result = asyncio.run(rubric.evaluate(truth, "reply"))
    assert [(r.name, r.correct) for r in result.results] == reference_walk(reqs, truth, judged)
