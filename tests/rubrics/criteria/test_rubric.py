"""Criteria rubrics: accepted shapes, loaders, error messages, and use as a training reward."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from rubrics import Rubric, RubricGroup
from rubrics.criteria.autograders import PerCriterionGrader, PerCriterionOutput, RubricAsJudgeGrader
from rubrics.criteria.criterion import Criterion, CriterionReport, EvaluationReport
from rubrics.criteria.rubric import CriteriaLoadError, CriteriaRubric

FLAT = [
    {"weight": 10.0, "requirement": "Mentions Paris"},
    {"weight": 5, "requirement": "Is concise"},
    {"weight": -8.0, "requirement": "Claims Lyon is the capital"},
]
SECTIONS = [
    {"name": "content", "criteria": FLAT[:2]},
    {"name": "errors", "criteria": FLAT[2:]},
]


@pytest.mark.parametrize(
    "data",
    [FLAT, SECTIONS, {"sections": SECTIONS}, {"rubric": FLAT}, {"rubric": {"sections": SECTIONS}}],
    ids=["flat", "sections", "dict-sections", "dict-rubric", "nested"],
)
def test_every_accepted_shape_gives_the_same_criteria(data: Any) -> None:
    rubric = CriteriaRubric.from_dict(data)
    assert rubric.criteria == [Criterion.model_validate(c) for c in FLAT]
    assert rubric.to_dict()[0] == {"weight": 10.0, "requirement": "Mentions Paris"}


def test_yaml_and_json_text() -> None:
    assert CriteriaRubric.from_yaml(yaml.safe_dump({"sections": SECTIONS})).criteria[2].weight == -8.0
    assert len(CriteriaRubric.from_json(json.dumps(FLAT))) == 3


def test_from_file_paths_and_file_objects(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(yaml.safe_dump({"rubric": FLAT}))
    (tmp_path / "r.json").write_text(json.dumps(SECTIONS))
    assert len(CriteriaRubric.from_file(tmp_path / "r.yaml")) == 3
    assert len(CriteriaRubric.from_file(str(tmp_path / "r.json"))) == 3
    with open(tmp_path / "r.json", "rb") as handle:
        assert len(CriteriaRubric.from_file(handle)) == 3
    named = io.StringIO(yaml.safe_dump(FLAT))
    named.name = "inline.yml"
    assert len(CriteriaRubric.from_file(named)) == 3


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([FLAT[0], {"requirement": "no weight"}], r"<criteria>: \[1\]\.weight: is missing$"),
        (
            [{"weight": "heavy", "requirement": "x"}],
            r"\[0\]\.weight: wrong type \(expected a number, got 'heavy'\)$",
        ),
        (
            [{"weight": True, "requirement": "x"}],
            r"\[0\]\.weight: wrong type \(expected a number, got true\)",
        ),
        ([{"weight": 1, "requirement": ""}], r"\[0\]\.requirement: is empty \(expected a non-empty string"),
        (  # the misspelt field is named first: it explains the missing one
            [{"weight": 1, "requirment": "typo"}],
            r"\[0\]\.requirment: unknown field \(allowed: weight, requirement, name, tags, rule\) \(and 1 more",
        ),
        (
            [{"weight": float("nan"), "requirement": "x"}],
            r"\[0\]\.weight: wrong type \(expected a finite number",
        ),
        (
            {"sections": [{"criteria": FLAT}, {"criteria": [FLAT[0], 7]}]},
            r"sections\[1\]\.criteria\[1\]: wrong type \(expected a mapping with weight and requirement, got 7\)",
        ),
        ({"items": FLAT}, "'sections', 'rubric' or 'criteria' key, got a mapping"),
        ("just text", r"expected a list of criteria, got 'just text'"),
        ([], "at least one criterion"),
    ],
)
def test_errors_name_the_item_and_the_field(data: Any, message: str) -> None:
    with pytest.raises(CriteriaLoadError, match=message):
        CriteriaRubric.from_dict(data)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"sections": [{"criteria": [{"weight": 1}]}]}))
    with pytest.raises(
        CriteriaLoadError, match=r"bad\.yaml:3: sections\[0\]\.criteria\[0\]\.requirement: is missing"
    ):
        CriteriaRubric.from_file(path)
    broken = tmp_path / "broken.json"
    broken.write_text("[{")
    with pytest.raises(CriteriaLoadError, match=r"broken\.json:1: not valid JSON"):
        CriteriaRubric.from_file(broken)
    with pytest.raises(CriteriaLoadError, match=r"missing\.yaml: file not found"):
        CriteriaRubric.from_file(tmp_path / "missing.yaml")


def test_report_types() -> None:
    report = CriterionReport(weight=2.0, requirement="r", verdict="MET", reason="because")
    assert isinstance(report, Criterion) and report.verdict == "MET"
    with pytest.raises(ValueError):
        CriterionReport(weight=2.0, requirement="r", verdict="PASS", reason="")  # type: ignore[arg-type]
    assert EvaluationReport(score=1.0, raw_score=2.0, llm_raw_score=2.0).report is None


async def test_grade_needs_an_autograder() -> None:
    with pytest.raises(ValueError, match="no autograder"):
        await CriteriaRubric.from_dict(FLAT).grade("text")


# -- as a training reward -----------------------------------------------------------------------------------


class CountingGenerate:
    """MET when the requirement's first word-ish keyword appears in the response; counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, system_prompt: str, user_prompt: str) -> PerCriterionOutput:
        self.calls += 1
        response = user_prompt.split("<response>")[1]
        met = ("Mentions Paris" in user_prompt and "Paris" in response) or (
            "concise" in user_prompt and len(response) < 40
        )
        return PerCriterionOutput(explanation="", criterion_status="MET" if met else "UNMET")


async def test_as_rubric_scores_rollouts_and_logs_each_verdict() -> None:
    generate = CountingGenerate()
    criteria = CriteriaRubric.from_dict(FLAT)
    rubric = criteria.as_rubric(PerCriterionGrader(generate))
    states: list[dict[str, Any]] = [
        {"prompt": [{"role": "user", "content": "Capital of France?"}], "completion": "Paris."},
        {"prompt": [{"role": "user", "content": "Capital of France?"}], "completion": "x" * 60},
    ]
    await rubric.score_group(states)  # type: ignore[arg-type]
    first, second = states
    assert first["reward"] == 1.0  # (10 + 5) / 15
    assert first["metrics"] == {"criteria": 1.0, "criterion/0": 1.0, "criterion/1": 1.0, "criterion/2": 0.0}
    assert second["reward"] == 0.0 and second["metrics"]["criterion/0"] == 0.0
    assert first["advantage"] == 0.5 and second["advantage"] == -0.5
    assert generate.calls == 2 * 3  # one grading per rollout, shared by the score and the 3 metrics


async def test_criteria_reward_inside_a_rubric_group_with_weights() -> None:
    criteria = CriteriaRubric.from_dict(FLAT)
    length = Rubric(funcs=[lambda completion: float(len(completion) < 10)], weights=[0.5])
    group = RubricGroup([criteria.as_rubric(PerCriterionGrader(CountingGenerate()), weight=2.0), length])
    state: dict[str, Any] = {"prompt": "Capital of France?", "completion": "Paris."}
    await group.score_rollout(state)  # type: ignore[arg-type]
    assert state["reward"] == 2.5  # 2.0 * 1.0 (criteria) + 0.5 * 1.0 (short)


async def test_a_failing_grader_marks_the_rollout() -> None:
    def broken(system_prompt: str, user_prompt: str) -> str:
        return "I refuse to answer in JSON"

    rubric = CriteriaRubric.from_dict(FLAT).as_rubric(PerCriterionGrader(broken))
    state: dict[str, Any] = {"prompt": "q", "completion": "Paris"}
    await rubric.score_rollout(state)  # type: ignore[arg-type]
    assert math.isnan(state["reward"]) and state["metrics"]["errors/criteria"] == 1.0
    assert math.isnan(state["metrics"]["criterion/0"]) and "errors/criterion/0" not in state["metrics"]
    assert "not a valid PerCriterionOutput" in state["error"]


async def test_holistic_grader_as_rubric_has_no_verdict_metrics() -> None:
    grader = RubricAsJudgeGrader(lambda s, u: {"explanation": "", "overall_score": 135})
    rubric = CriteriaRubric.from_dict(FLAT, source=None).as_rubric(grader)
    state: dict[str, Any] = {"prompt": "q", "completion": "Paris"}
    await rubric.score_rollout(state)  # type: ignore[arg-type]
    assert state["reward"] == 1.0 and state["metrics"] == {"criteria": 1.0}  # 135 clamped to 1.0


def test_named_criteria_give_named_metrics() -> None:
    rubric = CriteriaRubric([{"weight": 1, "requirement": "r", "name": "mentions_paris"}])
    assert rubric.metric_name(0) == "criterion/0_mentions_paris"


def test_weights_whose_total_overflows_are_refused_at_the_weight_that_overflows(tmp_path: Path) -> None:
    # each weight is finite, but 1e308 + 1e308 is past the largest float (1.798e308): every score would fail
    path = tmp_path / "huge.yaml"
    path.write_text(
        "- {weight: 1.0e308, requirement: a}\n- {weight: -1, requirement: b}\n- {weight: 1.0e308, requirement: c}\n"
    )
    with pytest.raises(CriteriaLoadError) as err:
        CriteriaRubric.from_file(path)
    assert str(err.value) == (
        f"{path}:3: [2].weight: the positive weights up to this one add up to inf, out of the range of a float "
        "(±1.798e+308), so no score could be computed (expected a finite positive total)"
    )
    pitfalls = [{"weight": -1e308, "requirement": "a"}, {"weight": -1e308, "requirement": "b"}]
    with pytest.raises(CriteriaLoadError, match=r"^<criteria>: \[1\]\.weight: the negative weights .* -inf"):
        CriteriaRubric(pitfalls)
    # the largest totals that fit are kept, and score
    rubric = CriteriaRubric([{"weight": 1e308, "requirement": "a"}, {"weight": -1e308, "requirement": "b"}])
    assert [c.weight for c in rubric.criteria] == [1e308, -1e308]
