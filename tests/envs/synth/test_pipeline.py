"""The pipeline against a real local OpenAI-compatible server scripted to misbehave: every drop reason, the
repair request, coverage, outputs, resume checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from envs.synth.item import DROP_REASONS
from rubrics.multistep.rubric_io import load_rubric, load_scenarios
from tests.envs.synth.helpers import PHRASES, ROADSIDE, assert_honest, questions, run
from tests.support.judge_server import JudgeServer
from tests.support.synth_server import ScenarioWriter

SCRIPT = [
    "ok",
    "hidden_500",
    "scenario_truncated",
    "truncated_once",
    "malformed",
    "invalid",
    "invalid_repaired",
    "off_path",
    "off_path_repaired",
    "ideal_fail",
    "wrong_passes",
    "dup_exact",
    "dup_exact",
    "dup_near",
    "dup_near",
    "ok",
]
"""Behaviour of scenario number i + 1."""


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, JudgeServer, ScenarioWriter]:
    writer = ScenarioWriter(PHRASES, dict(enumerate(SCRIPT, start=1)))
    out = tmp_path_factory.mktemp("synth")
    with JudgeServer(writer, fault_for=writer.fault_for) as server:
        report = run(server.base_url, out, n=len(SCRIPT))
    return report, out, server, writer


def test_every_drop_reason_is_counted(scripted_run: tuple) -> None:
    report = scripted_run[0]
    assert_honest(report)
    assert report["dropped"] == {
        "hidden_failed": 1,  # hidden_500
        "scenario_failed": 2,  # scenario_truncated, malformed
        "invalid": 1,
        "off_path": 1,
        "regrade_ideal_failed": 1,
        "regrade_wrong_passed": 1,
        "regrade_error": 0,  # needs an LLM judge: test_judge_errors_during_regrading
        "duplicate": 2,  # the second dup_exact and the second dup_near
    }
    assert set(report["dropped"]) == set(DROP_REASONS)
    # kept: ok x2, truncated_once, invalid_repaired, off_path_repaired, the first dup_exact and dup_near
    assert report["counts"]["kept"] == 7
    # repairs: invalid, invalid_repaired, off_path, off_path_repaired, and ideal_fail/wrong_passes never
    assert report["counts"]["repair_requested"] == 4
    assert report["counts"]["repair_passed_checks"] == 2
    details = {d["reason"]: d["detail"] for d in report["drops"]}
    assert "500" in details["hidden_failed"]
    assert "notes" in details["invalid"] and "after one repair" in details["invalid"]
    assert "planned" in details["off_path"]
    assert "wrong reply" in details["regrade_wrong_passed"]
    assert details["duplicate"].startswith(("prompt repeats", "hidden_description repeats"))
    faults = report["this_run"]["faults"]
    assert faults["server_error"] == 3 and faults["malformed"] >= 3 + 3 + 1  # 3 cut, 3 prose, 1 cut once


def test_repair_request_carries_the_validator_message(scripted_run: tuple) -> None:
    _, _, server, writer = scripted_run
    repairs = [r for r in server.requests if writer.kind(r) == "repair"]
    assert len(repairs) == 4
    by_case = {writer.case(r): r["messages"] for r in repairs}
    invalid_case = SCRIPT.index("invalid_repaired") + 1
    messages = by_case[invalid_case]
    assert messages[-2]["role"] == "assistant" and '"answer": 7.0' in messages[-2]["content"]
    assert "failed validation" in messages[-1]["content"] and "7" in messages[-1]["content"]
    # structured output: every scenario request carried the route's strict schema
    scenario = next(r for r in server.requests if writer.kind(r) == "scenario")
    schema = scenario["response_format"]["json_schema"]["schema"]
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]["answers"]["required"]) <= {
        "scene_safe",
        "hazard",
        "conscious",
        "history",
        "breathing",
    }


def test_outputs_load_and_match_the_report(scripted_run: tuple) -> None:
    from datasets import load_from_disk

    report, out, _, _ = scripted_run
    rubric = load_rubric(ROADSIDE)
    kept = report["counts"]["kept"]
    from_yaml = load_scenarios(out / "scenarios.yaml", rubric, strict=True)
    from_jsonl = load_scenarios(out / "scenarios.jsonl", rubric, strict=True)
    assert len(from_yaml) == len(from_jsonl) == kept
    assert [s.to_dict() for s in from_yaml] == [s.to_dict() for s in from_jsonl]
    hidden = [json.loads(line) for line in (out / "hidden_descriptions.jsonl").read_text().splitlines()]
    assert [h["name"] for h in hidden] == [s.name for s in from_yaml]
    data = load_from_disk(str(out / "dataset"))
    assert set(data) == {"hidden", "scenarios"}
    assert len(data["hidden"]) == len(data["scenarios"]) == kept
    assert json.loads(data["scenarios"][0]["answers"]) == from_yaml[0].to_dict()["answers"]
    assert json.loads((out / "report.json").read_text()) == report
    # coverage counts what the kept scenarios really hold
    for name, answers in report["coverage"].items():
        for label, cell in answers.items():
            have = sum(
                1 for s in from_yaml if name in s.answers and f"{s.answers[name]['answer']:g}" == label
            )
            assert cell["kept"] == have, (name, label)
    assert yaml.safe_load((out / "scenarios.yaml").read_text())["rubric"] == "roadside"
    assert not list(out.glob(".*")), "no temporary file is left behind"


def test_a_finished_run_is_not_redone_and_other_settings_are_refused(scripted_run: tuple) -> None:
    from envs.synth.pipeline import ResumeMismatchError

    report, out, _, _ = scripted_run
    writer = ScenarioWriter(PHRASES)
    with JudgeServer(writer) as server:
        again = run(server.base_url, out, n=len(SCRIPT))
        assert server.requests == []  # every item had its record
        with pytest.raises(ResumeMismatchError, match="n: 16 there, 17 now"):
            run(server.base_url, out, n=len(SCRIPT) + 1)
    assert {k: v for k, v in again.items() if k != "this_run"} == {
        k: v for k, v in report.items() if k != "this_run"
    }


def test_judge_errors_during_regrading(tmp_path: Path) -> None:
    writer = ScenarioWriter(PHRASES, {2: "judge_500"}, questions=questions())
    with JudgeServer(writer, fault_for=writer.fault_for) as server:
        data = yaml.safe_load(ROADSIDE.read_text())
        data["judges"] = {
            "llm": {"type": "llm", "base_url": server.base_url, "model": "judge", "max_attempts": 2}
        }
        data["default_judge"] = "llm"
        for req in data["requirements"]:
            req.pop("rules")
        rubric = tmp_path / "roadside_llm.yaml"
        rubric.write_text(yaml.safe_dump(data))
        report = run(server.base_url, tmp_path / "out", n=3, rubric=rubric)
    assert_honest(report)
    assert report["dropped"]["regrade_error"] == 1
    assert report["counts"]["kept"] == 2  # the LLM judge (scripted) agrees with the ideal replies
    judged = [r for r in server.requests if writer.kind(r) == "judge"]
    assert judged and all("<ground_truth>" in r["messages"][-1]["content"] for r in judged)
