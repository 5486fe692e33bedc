"""The composed first_responder scenario sets: balanced, covering, disjoint, up to date, and fair prompts."""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rubrics.judges.matching import phrase_pattern
from rubrics.multistep import MultiStepRubric, Scenario, ground_truth_walk, load_rubric, load_scenarios
from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[3]
SPLITS = {"train": 40, "heldout": 12}  # split -> the fewest scenarios it may hold
NEVER_TRUE = {("bsi_ppe", 0.0): "no patient is safe to touch without gloves"}
"""Answer values no scenario takes, and why."""


def composer() -> ModuleType:
    return load_script("compose_scenarios")


@pytest.fixture(scope="module")
def rubric() -> MultiStepRubric:
    return load_rubric(ROOT / "configs/rubrics/first_responder.yaml")


def split_file(split: str) -> Path:
    return ROOT / f"configs/scenarios/first_responder_{split}.yaml"


def answer_values(rubric: MultiStepRubric) -> set[tuple[str, Any]]:
    """Every (requirement, answer) a scenario could take: both binary answers, every discrete option."""
    values = set()
    for req in rubric.requirements:
        options = list(getattr(req, "options", {})) if req.kind == "discrete" else [0.0, 1.0]
        values |= {(req.name, req.validate_answer(v)) for v in options}
    return values


@pytest.mark.parametrize("split", SPLITS)
def test_committed_files_are_the_composers_output(split: str) -> None:
    compose = composer()
    assert split_file(split).read_text() == compose.render(compose.load_parts(), split), (
        "run scripts/compose_scenarios.py"
    )


@pytest.mark.parametrize("split", SPLITS)
def test_split_is_large_balanced_and_covers_every_answer(rubric: MultiStepRubric, split: str) -> None:
    scenarios = load_scenarios(split_file(split), rubric, strict=True)
    assert len(scenarios) >= SPLITS[split]
    root = Counter(s.answers["scene_safety"]["answer"] for s in scenarios)
    assert abs(root[1.0] - root[0.0]) <= len(scenarios) // 10, f"safe vs unsafe scenes: {root}"
    taken: set[tuple[str, Any]] = set()
    for s in scenarios:
        walk = ground_truth_walk(rubric.graph, s.answers)
        assert walk.stop_reason == "terminal" and {r.name for r in walk.results} == set(s.answers), s.name
        taken |= {(r.name, r.truth) for r in walk.results}
    missing = answer_values(rubric) - taken - set(NEVER_TRUE)
    assert not missing, f"{split}: answers no scenario takes: {sorted(missing, key=str)}"
    for req in rubric.requirements:  # and so every branch key of every requirement
        for key in req.dependencies:
            assert (req.name, req.validate_answer(key)) in taken, (split, req.name, key)


def test_heldout_shares_no_scene_and_no_pair_with_training() -> None:
    compose = composer()
    parts = compose.load_parts()
    train = compose.pairs(parts, "train")
    heldout = compose.pairs(parts, "heldout")
    assert not {s["name"] for s, _ in train} & {s["name"] for s, _ in heldout}
    assert not {(s["name"], p["name"]) for s, p in train} & {(s["name"], p["name"]) for s, p in heldout}
    assert parts["templates"]["train"] != parts["templates"]["heldout"]


HELD_OUT_SCENES = 18
"""The fewest held-out scenes: the size-up (``scene_safety``, then ``hazard_type``) is decided by the scene
alone, so its held-out rates rest on as many independent pieces of evidence as there are scenes."""


def test_heldout_sets_spread_over_many_scenes_no_training_scenario_has(rubric: MultiStepRubric) -> None:
    """Every held-out scene is played, none by a training scenario (nor set in a training scene's place), and no
    held-out set plays a scene twice: a set's intervals, clustered by scenario, are then clustered by scene too,
    the unit the size-up depends on. The held-out scenes are half safe, and the unsafe ones cover every
    ``hazard_type`` of the rubric."""
    compose = composer()
    parts = compose.load_parts()
    scenes = [s for s in parts["scenes"] if s["split"] == "heldout"]
    train = {s["name"] for s, _ in compose.pairs(parts, "train")}
    played: set[str] = set()
    for split in ("heldout", "conditions"):
        names = [s["name"] for s, _ in compose.pairs(parts, split)]
        assert len(names) == len(set(names)), f"{split}: a scene serves two scenarios"
        played |= set(names)
    assert len(scenes) >= HELD_OUT_SCENES and played == {s["name"] for s in scenes} and not played & train
    places = {s["place"] for s in parts["scenes"] if s["split"] == "train"}
    assert not places & {s["place"] for s in scenes}, "a held-out scene is set where a training scene is"
    hazards = Counter(s.get("hazard_type") for s in scenes)
    safe = hazards.pop(None, 0)
    assert abs(safe - sum(hazards.values())) <= 1, f"{safe} safe held-out scenes, unsafe ones: {hazards}"
    options = next(getattr(r, "options", {}) for r in rubric.requirements if r.name == "hazard_type")
    assert set(hazards) == set(options), (
        f"held-out hazard types {sorted(hazards)}, the rubric's {sorted(options)}"
    )


@pytest.mark.parametrize("split", ["heldout", "heldout_conditions"])
def test_heldout_prompts_are_worded_differently(rubric: MultiStepRubric, split: str) -> None:
    """No sentence of a held-out prompt appears in any training prompt: the held-out sets measure
    generalisation to new wording and new scenes, not recall."""
    train = " ".join(str(s.prompt) for s in load_scenarios(split_file("train"), rubric))
    for s in load_scenarios(split_file(split), rubric):
        sentences = [x.strip() for x in re.split(r"(?<=[.?!])\s+", str(s.prompt)) if len(x.strip()) > 25]
        assert sentences and not [x for x in sentences if x in train], s.name


@pytest.mark.parametrize("split", [*SPLITS, "heldout_conditions"])
def test_prompts_hand_the_model_no_phrase_a_judge_looks_for(rubric: MultiStepRubric, split: str) -> None:
    """Phrases only: a prompt must name its hazards ('knife', 'traffic'), which some ``regex`` rules require."""
    phrases = {
        p for req in rubric.requirements for spec in req.rules.values() for key in ("any", "all", "negated")
        for p in spec.get(key, [])
    }  # fmt: skip
    for s in load_scenarios(split_file(split), rubric):
        assert isinstance(s.prompt, str)
        found = sorted(p for p in phrases if phrase_pattern(p).search(s.prompt))
        assert not found, f"{s.name}: prompt contains {found}"


def test_the_phrase_check_can_fail(rubric: MultiStepRubric) -> None:
    prompt = "Dispatch: man down, police on scene, he is unresponsive."
    assert phrase_pattern("police").search(prompt) and phrase_pattern("unresponsive").search(prompt)


def test_scenario_names_are_unique_across_splits(rubric: MultiStepRubric) -> None:
    names = [s.name for split in SPLITS for s in load_scenarios(split_file(split), rubric)]
    assert len(names) == len(set(names))


def test_composed_scenarios_load_as_scenarios(rubric: MultiStepRubric) -> None:
    compose = composer()
    for split in SPLITS:
        for data in compose.compose(compose.load_parts(), split):
            turns = data.pop("ideal_turns")
            Scenario(**data).validate(rubric, strict=True)
            assert len(turns) >= 2


def test_committed_demonstrations_are_the_composers_and_play_only_training_scenarios() -> None:
    """The warm start's demonstrations: current, one per training scenario, none of a held-out one, each a
    perfect conversation (the composer refuses parts whose ideal replies earn less than 1.0)."""
    compose = composer()
    path = ROOT / "configs/scenarios/first_responder_train_demos.jsonl"
    assert path.read_text() == compose.demonstrations(compose.load_parts()), (
        "run scripts/compose_scenarios.py"
    )
    demos = [json.loads(line) for line in path.read_text().splitlines()]
    train = [s.name for s in load_scenarios(split_file("train"), load_rubric(compose.RUBRIC))]
    held = {s.name for s in load_scenarios(split_file("heldout"), load_rubric(compose.RUBRIC))}
    assert [d["scenario"] for d in demos] == train and not held & {d["scenario"] for d in demos}
    assert all(d["reward"] == 1.0 for d in demos)
    for demo in demos:  # the dispatch first, then reply and reveal in turn, ending on a reply
        roles = [m["role"] for m in demo["messages"]]
        assert roles[0] == "user" and roles[-1] == "assistant"
        assert all(a != b for a, b in itertools.pairwise(roles))


def test_new_conditions_are_held_out_whole(rubric: MultiStepRubric) -> None:
    """The second held-out set: patients whose conditions no training (or first held-out) scenario has, each
    in one safe and one unsafe held-out scene, every walk reaching its end."""
    compose = composer()
    parts = compose.load_parts()
    path = split_file("heldout_conditions")
    assert path.read_text() == compose.render(parts, "conditions"), "run scripts/compose_scenarios.py"
    new = {p["name"] for p in parts["patients"] if p.get("new_condition")}
    seen = {p["name"] for split in ("train", "heldout") for _, p in compose.pairs(parts, split)}
    pairs = compose.pairs(parts, "conditions")
    assert len(new) >= 5 and {p["name"] for _, p in pairs} == new and not new & seen
    assert {s["split"] for s, _ in pairs} == {"heldout"}
    scenarios = load_scenarios(path, rubric, strict=True)
    root = Counter(s.answers["scene_safety"]["answer"] for s in scenarios)
    assert len(scenarios) == 2 * len(new) and root[1.0] == root[0.0] == len(new)
    for s in scenarios:
        assert ground_truth_walk(rubric.graph, s.answers).stop_reason == "terminal", s.name
