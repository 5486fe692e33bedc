"""The ``rubric-grpo eval`` command: on the tiny model, the whole file by default, bad input reported, a
criteria dataset (in process and through the vLLM server), a bad criteria line refused before a model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip("transformers")


from train.cli import main

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "backend", ["local", pytest.param("vllm_colocate", marks=[pytest.mark.vllm, pytest.mark.slow])]
)
def test_eval_command_on_the_tiny_model(tiny_model_dir: Path, tmp_path: Path, capsys, backend: str) -> None:
    if backend == "vllm_colocate":  # the colocated vLLM engine in this process
        from tests.support.vllm_fixtures import vllm_in_process_or_skip

        vllm_in_process_or_skip()
    out = tmp_path / "eval"
    rc = main(
        [
            "eval",
            "--backend",
            backend,
            "--rubric",
            str(ROOT / "configs/rubrics/first_responder.yaml"),
            "--scenarios",
            str(ROOT / "configs/scenarios/first_responder.yaml"),
            "--model",
            str(tiny_model_dir),
            "--n",
            "2",
            "--max-tokens",
            "16",
            "--split",
            "eval",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rollouts"] == 2 * 3  # 13 scenarios, a quarter held out (asked for): 3
    assert (out / "eval.png").stat().st_size > 1000
    assert "requirement pass rates" in capsys.readouterr().out


def test_eval_command_evaluates_the_whole_file_by_default(tiny_model_dir: Path, tmp_path: Path) -> None:
    """A scenario file given for evaluation is evaluated whole; a split only when one is asked for."""
    data = yaml.safe_load((ROOT / "configs/scenarios/first_responder.yaml").read_text())
    scenarios = tmp_path / "two.yaml"
    scenarios.write_text(yaml.safe_dump({**data, "scenarios": data["scenarios"][:2]}))
    common = ["eval", "--rubric", str(ROOT / "configs/rubrics/first_responder.yaml"), "--scenarios"]
    common += [str(scenarios), "--model", str(tiny_model_dir), "--n", "1", "--max-tokens", "2"]
    common += ["--max-turns", "1", "--no-progress"]
    for extra, rollouts in (([], 2), (["--eval-fraction", "0.25"], 1)):  # a quarter of 2, at least 1
        out = tmp_path / f"eval{len(extra)}"
        assert main([*common, *extra, "--out", str(out)]) == 0
        assert json.loads((out / "summary.json").read_text())["rollouts"] == rollouts


def test_eval_command_reports_bad_input(tmp_path: Path, capsys) -> None:
    rc = main(["eval", "--rubric", str(tmp_path / "missing.yaml"), "--scenarios", "x.yaml", "--no-progress"])
    assert rc == 2 and "missing.yaml: file not found" in capsys.readouterr().err


def test_eval_command_on_a_criteria_dataset(tiny_model_dir: Path, tmp_path: Path, capsys) -> None:
    """``--criteria``: per-prompt criteria, graded by their rules, with HealthBench's overall and per-tag
    scores printed, in summary.json and in report.md."""
    from tests.train.test_criteria_run import rule_only_split

    _, held = rule_only_split(tmp_path)
    out = tmp_path / "eval"
    common = ["eval", "--criteria", str(held), "--model", str(tiny_model_dir), "--n", "2"]
    rc = main([*common, "--max-tokens", "8", "--out", str(out), "--no-progress"])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rollouts"] == 2 * 2 and "healthbench/overall" in summary
    printed = capsys.readouterr().out
    assert "## Held-out by tag: model" in printed and "| overall |" in printed
    assert "| overall |" in (out / "report.md").read_text()
    rows = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    assert all(v["judged_by"] == "rule" for r in rows for v in r["criteria"]["verdicts"])


def test_eval_command_refuses_a_bad_criteria_line_before_any_model_loads(tmp_path: Path, capsys) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text('{"id": "a", "prompt": "Hi?", "criteria": [{"weight": "heavy", "requirement": "x"}]}\n')
    rc = main(["eval", "--criteria", str(data), "--model", str(tmp_path / "no-model"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and f"{data}:1: criteria[0].weight" in err
    rc = main(["eval", "--criteria", str(data), "--rubric", "r.yaml", "--no-progress"])
    assert rc == 2 and "give either --criteria or --rubric" in capsys.readouterr().err


@pytest.mark.vllm
@pytest.mark.slow
def test_eval_command_on_a_criteria_dataset_through_the_vllm_server(
    vllm_server, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The criteria environment on the other backend: greedy replies from the real ``vllm serve`` equal the
    local backend's token for token (their texts may differ in a character cut at the token limit), and so
    do their scores."""
    from tests.train.test_criteria_run import rule_only_split

    _, held = rule_only_split(tmp_path)
    common = [
        "eval",
        "--criteria",
        str(held),
        "--model",
        str(tiny_model_dir),
        "--n",
        "1",
        "--temperature",
        "0",
    ]
    common += ["--max-tokens", "12", "--no-progress"]
    remote = ["--backend", "vllm", "--vllm-url", vllm_server.base_url]
    for name, extra in (("local", []), ("vllm", remote)):
        assert main([*common, *extra, "--out", str(tmp_path / name)]) == 0
    rows = {
        name: sorted(
            (r["info"]["scenario"], r["trajectory"][0]["completion_ids"], r["criteria"]["score"])
            for r in map(json.loads, (tmp_path / name / "rollouts.jsonl").read_text().splitlines())
        )
        for name in ("local", "vllm")
    }
    assert rows["local"] == rows["vllm"] and len(rows["vllm"]) == 2
