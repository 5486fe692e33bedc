"""A rule keeps the meaning its author gave it: a regex matches as written, the negation heuristic applies
to phrases only and can be switched off per rule (validated, saved, shown), and ``rubric validate`` warns
about rules that cannot mean what they seem to."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from rubrics.judges.matching import check_rule_spec, rule_verdict
from rubrics.loading import load_yaml_file
from rubrics.multistep import (
    BinaryRequirement,
    MultiStepRubric,
    RuleRequirementJudge,
    load_rubric,
    save_rubric,
)
from rubrics.multistep.lint import requirement_warnings
from rubrics.multistep.show import describe
from train.cli import main

OLD_RULES = load_yaml_file(Path(__file__).parent / "old_rules.yaml")["cases"]
CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "rubrics"


@pytest.mark.parametrize(
    ("case", "reply"),
    [(case, reply) for case in OLD_RULES for reply in case["verdicts"]],
    ids=lambda v: v["name"] if isinstance(v, dict) else v[:30],
)
def test_rules_written_before_negation_awareness_keep_their_verdicts(case: dict, reply: str) -> None:
    for value, spec in case["rules"].items():
        check_rule_spec(case["name"], value, spec)
    requirement = BinaryRequirement(name=case["name"], question="?", rules=case["rules"])
    judged = asyncio.run(RuleRequirementJudge().judge_for(requirement)(None, reply, None))
    assert judged.answer == case["verdicts"][reply] == rule_verdict(requirement.rules, reply)


def test_negation_awareness_is_what_the_switch_says() -> None:
    said, as_written = {"any": ["safe"]}, {"any": ["safe"], "negation_aware": False}
    assert rule_verdict({1.0: said}, "The scene is not safe.") is None
    assert rule_verdict({1.0: as_written}, "The scene is not safe.") == 1.0
    assert rule_verdict({1.0: {"any": ["safe"], "negation_aware": True}}, "not safe") is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"any": ["safe"], "negation_aware": "no"}, "'negation_aware' must be true or false, got 'no'"),
        ({"any": ["safe"], "negation_aware": 0}, "'negation_aware' must be true or false"),
        ({"negation_aware": False}, "must be a mapping with any of"),
        ({"negated": ["safe"], "negation_aware": False}, "'negated' needs the negation heuristic"),
    ],
)
def test_the_switch_is_validated(spec: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_rule_spec("scene_safety", 1.0, spec)


def _rubric(rules: dict[float, dict[str, Any]]) -> MultiStepRubric:
    return MultiStepRubric(
        [BinaryRequirement(name="hazard", question="Hazard?", rules=rules)], [RuleRequirementJudge()]
    )


def test_the_switch_survives_a_save_and_is_shown(tmp_path: Path) -> None:
    rubric = _rubric({1.0: {"any": ["hazard"], "negation_aware": False}, 0.0: {"none": ["hazard"]}})
    save_rubric(rubric, tmp_path / "r.yaml")
    again = load_rubric(tmp_path / "r.yaml")
    assert again.graph.requirements["hazard"].rules[1.0] == {"any": ["hazard"], "negation_aware": False}
    shown = describe(again)
    assert "negation_aware: false" in shown and "a regex always matches as written" in shown
    assert "  hazard = 1: any 'hazard'; phrases as written" in shown.splitlines()
    assert "  hazard = 0: none 'hazard'; negation-aware" in shown.splitlines()


@pytest.mark.parametrize(
    ("rules", "warnings"),
    [
        ({1.0: {"any": ["gloves"]}, 0.0: {"none": ["gloves"]}}, []),
        (
            {1.0: {"any": ["do not induce"], "regex": r"\bvomit\w*"}, 0.0: {"none": ["do not induce"]}},
            [(1.0, "its first phrase 'do not induce' does not satisfy this answer's rule")],
        ),
        (
            {1.0: {"any": ["gloves"]}, 0.0: {"any": ["gloves on"]}},
            [
                (
                    0.0,
                    "its first phrase 'gloves on' satisfies the rules of answers 1 and 0 (the judge takes 1)",
                )
            ],
        ),
        (
            {1.0: {"all": ["put on gloves"], "none": ["glove"]}, 0.0: {"any": ["bare hands"]}},
            [
                (
                    1.0,
                    "this answer's rule can match nothing: 'all' phrase 'put on gloves' says the 'none' phrase 'glove'",
                )
            ],
        ),
        (
            {1.0: {"any": ["gloves on", "wear gloves"], "none": ["gloves"]}, 0.0: {"none": ["x"]}},
            [
                (
                    1.0,
                    "this answer's rule can match nothing: every 'any' phrase says a 'none' phrase ('gloves' in 'gloves on')",
                )
            ],
        ),
    ],
)
def test_lint_finds_rules_that_cannot_mean_what_they_seem(rules: dict, warnings: list) -> None:
    req = BinaryRequirement(name="ppe", question="PPE?", rules=rules)
    assert [(w.answer, w.message) for w in requirement_warnings(req)] == warnings


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_the_shipped_rubrics_validate_strictly(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rubric", "validate", str(path), "--strict"]) == 0, capsys.readouterr().err
