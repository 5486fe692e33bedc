"""The evaluation run, its summary statistics, and the ``rubric-grpo eval`` command."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

pytest.importorskip("transformers")

from transformers import AutoTokenizer

from envs.evaluation import format_summary, run_eval, summarize
from envs.multistep_env import MultiStepMultiTurnEnv
from rubrics.types import EvaluationResult, RequirementResult
from tests.envs.test_environments import SCENARIO, reveal_rubric
from tests.support.scripted_backend import ScriptedBackend
from train.cli import main

ROOT = Path(__file__).resolve().parents[3]


def verdicts(*judged: tuple[str, bool]) -> EvaluationResult:
    return EvaluationResult([RequirementResult(name, 0, 1.0, 1.0, correct) for name, correct in judged])


def test_summary_statistics_by_hand() -> None:
    states = [
        {
            "info": {"scenario": "a"},
            "reward": 1.0,
            "metrics": {"depth": 2.0},
            "stop_reason": "terminal",
            "completion": [{"content": "a"}],
            "multistep": verdicts(("x", True), ("y", True)),
        },
        {
            "info": {"scenario": "b"},
            "reward": 0.0,
            "metrics": {"depth": 0.0},
            "stop_reason": "incorrect",
            "completion": [{"content": "b"}],
            "multistep": verdicts(("x", False)),
        },
        {
            "info": {"scenario": "b"},
            "reward": 0.5,
            "metrics": {"depth": 1.0},
            "stop_reason": "max_turns",
            "completion": [{"content": "a"}],
            "multistep": verdicts(("x", True)),
        },
        {"reward": math.nan, "error": "judge gone", "completion": [{"content": "c"}]},
    ]
    s = summarize(states, wall_s=2.0, examples=2)
    # healthy rewards 1.0 (scenario a), 0.0 and 0.5 (b): mean 0.5, sample variance (0.25 + 0.25 + 0) / 2 = 0.25,
    # std 0.5. Interval clustered by scenario: residual sums a +0.5, b -0.5 + 0 = -0.5; variance
    # 2 / 1 * (0.25 + 0.25) / 3^2 = 1/9, se 1/3; t with 1 degree of freedom 12.706: half-width 4.2353
    assert s.reward_mean == pytest.approx(0.5) and s.reward_std == pytest.approx(0.5)
    assert s.reward_ci95 == pytest.approx(12.706 / 3)
    # one scenario is one piece of evidence: no interval
    assert math.isnan(summarize(states[:1], wall_s=1.0, examples=1).reward_ci95)
    assert s.errored == 1 and s.pass_rates == {"x": (2, 3), "y": (1, 1)}
    assert s.depth == {0: 2, 1: 1, 2: 1} and s.stop_reasons["error"] == 1
    assert s.distinct_fraction == 3 / 4
    assert "x  " in format_summary(s) and "66.7%" in format_summary(s)


async def test_run_eval_writes_every_rollout(tiny_model_dir: Path, tmp_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    env = MultiStepMultiTurnEnv(reveal_rubric(), [SCENARIO], tokenizer)
    backend = ScriptedBackend(
        tokenizer, ["The scene is safe.", "I check vitals.", "Give oxygen, recovery position."]
    )
    summary, states = await run_eval(
        env, backend, env.dataset, n=3, out_path=tmp_path / "r.jsonl", progress=False
    )
    lines = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert len(lines) == len(states) == summary.rollouts == 3
    assert all("sequence" in x and "multistep" in x and "advantage" in x for x in lines)
    # the typed verdicts are written out as plain data, in the order the groups finished
    assert [x["multistep"] for x in lines] == [s["multistep"].to_dict() for s in states]
    assert summary.pass_rates["safety"] == (3, 3)


def test_eval_command_on_the_tiny_model(tiny_model_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "eval"
    rc = main(
        [
            "eval",
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
