"""The shipped examples: first_responder and incident_triage, with their scenarios."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rubrics.multistep import MultiStepRubric, Scenario, ground_truth_walk, load_rubric, load_scenarios

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ["first_responder", "incident_triage"]
IDEALS = yaml.safe_load((ROOT / "tests/data/ideal_replies.yaml").read_text())


def load(name: str) -> tuple[MultiStepRubric, list[Scenario]]:
    rubric = load_rubric(ROOT / f"configs/rubrics/{name}.yaml")
    return rubric, load_scenarios(ROOT / f"configs/scenarios/{name}.yaml", rubric)


def test_first_responder_shape() -> None:
    rubric, scenarios = load("first_responder")
    assert rubric.roots == ["scene_safety"]
    assert len(rubric.requirements) >= 20 and rubric.graph.depth >= 6
    assert len(scenarios) >= 8
    assert not rubric.graph.unreachable
    for req in rubric.requirements:  # runs offline (rules) and with a real judge model (question)
        assert req.rules and req.question.strip()
    assert {"rules", "llm"} <= set(rubric.judges)
    branching = [
        r
        for r in rubric.requirements
        if r.kind == "binary" and len([v for v in r.dependencies.values() if v]) == 2
    ]
    assert len(branching) >= 3  # both answers lead on
    with_reveals = [s for s in scenarios if s.revealed_info]
    assert len(with_reveals) == len(scenarios)


@pytest.mark.parametrize("name", EXAMPLES)
def test_scenarios_cover_every_branch(name: str) -> None:
    rubric, scenarios = load(name)
    taken: dict[str, set] = {}
    for s in scenarios:
        walk = ground_truth_walk(rubric.graph, s.answers)
        assert walk.stop_reason == "terminal", f"{s.name}: ground truth missing on its path"
        assert {r.name for r in walk.results} == set(s.answers), f"{s.name}: answers off its path"
        for r in walk.results:
            taken.setdefault(r.name, set()).add(r.truth)
    for req in rubric.requirements:
        assert req.name in taken, f"{req.name} is on no scenario's path"
        for key in req.dependencies:
            assert any(req.is_correct(t, key) for t in taken[req.name]), (
                f"{req.name}: branch {key!r} is taken by no scenario"
            )


@pytest.mark.parametrize("name", EXAMPLES)
async def test_an_ideal_reply_satisfies_the_whole_path_with_rule_judges(name: str) -> None:
    rubric, scenarios = load(name)
    for s in scenarios:
        result = await rubric.evaluate(s, IDEALS[name][s.name])
        assert result.stop_reason == "terminal", (
            s.name,
            [(r.name, r.answer, r.truth) for r in result.results if not r.correct],
        )
        assert rubric.reward(result, s.answers) == pytest.approx(1.0)


@pytest.mark.parametrize("name", EXAMPLES)
async def test_keyword_spam_does_not_win(name: str) -> None:
    """A reply listing every rule phrase (the gaming DESIGN.md section 7 describes) scores poorly."""
    rubric, scenarios = load(name)
    spam = " ".join(p for r in rubric.requirements for spec in r.rules.values() for p in spec.get("any", []))
    rewards = [rubric.reward(await rubric.evaluate(s, spam), s.answers) for s in scenarios]
    assert sum(rewards) / len(rewards) < 0.35


@pytest.mark.parametrize("name", EXAMPLES)
def test_reveals_sit_on_the_path(name: str) -> None:
    rubric, scenarios = load(name)
    for s in scenarios:
        path = {r.name for r in ground_truth_walk(rubric.graph, s.answers).results}
        assert set(s.revealed_info) <= path
