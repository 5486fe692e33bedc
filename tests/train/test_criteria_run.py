"""The trainer end to end on a criteria dataset and the tiny model: per-prompt criteria, their step
metrics, HealthBench's numbers in every evaluation, the probe and the per-tag sections of report.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from envs.criteria.scaffold import HINT_HEADER
from rubrics.criteria.example import CriteriaExample
from tests.train.runs import SMALL_RUN, metrics, run_config
from train.config import TrainConfig
from train.trainer import train

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests/data/criteria/native.jsonl"


def rule_only_split(tmp_path: Path) -> tuple[Path, Path]:
    """The native fixture's examples whose criteria all carry rules, twice each under new ids and prompts,
    as a training file, and twice more as a held-out file."""
    ruled = [
        CriteriaExample.model_validate_json(line) for line in FIXTURE.read_text().splitlines() if line.strip()
    ]
    ruled = [e for e in ruled if not e.needs_llm()]
    assert ruled  # the fixture has a rule-only example
    files = {}
    for part in ("train", "held"):
        copies = [
            e.model_copy(update={"id": f"{e.id}-{part}{k}", "prompt": f"{e.query} ({part} case {k})"})
            for e in ruled
            for k in range(2)
        ]
        files[part] = tmp_path / f"{part}.jsonl"
        files[part].write_text("".join(e.model_dump_json() + "\n" for e in copies))
    return files["train"], files["held"]


def rule_only_run(config: str, tiny_model_dir: Path, tmp_path: Path, *overrides: str) -> TrainConfig:
    """``configs/train/<config>``: two steps of one prompt on ``rule_only_split``'s files, output to
    ``tmp_path / "run"``, held-out evaluations before and after only; then ``overrides``."""
    train_file, held_file = rule_only_split(tmp_path)
    return run_config(
        config,
        tiny_model_dir,
        tmp_path / "run",
        "max_steps=2",
        f"env.data={train_file}",
        f"env.eval_data={held_file}",
        *SMALL_RUN,
        "rollout.prompts_per_step=1",
        "logging.eval_every=0",
        *overrides,
    )


@pytest.mark.slow
def test_criteria_run_logs_tags_and_reports_beside_the_probe(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(ROOT)
    run = tmp_path / "run"
    result = train(rule_only_run("criteria_cpu.yaml", tiny_model_dir, tmp_path))
    steps = [r for r in metrics(run) if "reward/mean" in r]
    assert len(steps) == 2
    for r in steps:
        assert r["criteria/rule_judged_fraction"] == 1.0 and "criteria/met_fraction" in r
        assert any(k.startswith("tag/axis:") and k.endswith("/pass_rate") for k in r)
    assert result["before"]["rollouts"] == result["after"]["rollouts"] == 2
    assert "healthbench/overall" in result["before"] and "healthbench/overall" in result["after"]
    rollout = json.loads((run / "eval_after" / "rollouts.jsonl").read_text().splitlines()[0])
    assert rollout["criteria"]["example"].endswith(("-held0", "-held1"))
    assert all(v["judged_by"] == "rule" for v in rollout["criteria"]["verdicts"])
    probe = [row["policy"] for row in json.loads((run / "probe.json").read_text())]
    assert probe == ["empty reply", "prompt echoed", "every rule phrase", "one sentence looped"]
    report = (run / "report.md").read_text()
    assert "## Held-out by tag: untrained" in report and "## Held-out by tag: trained" in report
    assert "| overall |" in report and "- every rule phrase: " in report
    assert "first decision" not in report  # no requirement DAG here


@pytest.mark.slow
def test_a_scaffolded_run_logs_the_share_shown_and_evaluates_on_plain_prompts(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(ROOT)
    run = tmp_path / "run"
    overrides = ("env.scaffold.per_rollout=same", "env.scaffold.schedule=linear")
    train(rule_only_run("criteria_cpu_scaffold.yaml", tiny_model_dir, tmp_path, *overrides))
    steps = [r for r in metrics(run) if "reward/mean" in r]
    assert [r["scaffold/share_shown"] for r in steps] == [1.0, 0.0]  # every hint, then none: it decayed
    assert [r["scaffold/share_scheduled"] for r in steps] == [1.0, 0.0]
    for when in ("eval_before", "eval_after"):
        for line in (run / when / "rollouts.jsonl").read_text().splitlines():
            rollout = json.loads(line)
            assert (
                HINT_HEADER not in json.dumps(rollout["prompt"]) and "scaffold_hints" not in rollout["info"]
            )
