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
            "reward": 1.0,
            "metrics": {"depth": 2.0},
            "stop_reason": "terminal",
            "completion": [{"content": "a"}],
            "multistep": verdicts(("x", True), ("y", True)),
        },
        {
            "reward": 0.0,
            "metrics": {"depth": 0.0},
            "stop_reason": "incorrect",
            "completion": [{"content": "b"}],
            "multistep": verdicts(("x", False)),
        },
        {
            "reward": 0.5,
            "metrics": {"depth": 1.0},
            "stop_reason": "max_turns",
            "completion": [{"content": "a"}],
            "multistep": verdicts(("x", True)),
        },
        {"reward": math.nan, "error": "judge gone", "completion": [{"content": "c"}]},
    ]
    s = summarize(states, wall_s=2.0, examples=2)
    # healthy rewards 1.0, 0.0, 0.5: mean 0.5, sample variance (0.25 + 0.25 + 0) / 2 = 0.25, std 0.5,
    # CI half-width 1.96 * sqrt(0.25 / 3) = 0.5658
    assert s.reward_mean == pytest.approx(0.5) and s.reward_std == pytest.approx(0.5)
    assert s.reward_ci95 == pytest.approx(1.96 * math.sqrt(0.25 / 3))
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
