"""``report.md`` from a run's held-out evaluation folders (hand-derived values)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from train.report_md import write_report_md


def _eval_folder(folder: Path, rewards: dict[str, list[float]]) -> None:
    rows = [
        {
            "info": {"scenario": name},
            "reward": r,
            "prompt": name,
            "completion": [{"role": "assistant", "content": "ok"}],
        }
        for name, values in rewards.items()
        for r in values
    ]
    mean = sum(r["reward"] for r in rows) / len(rows)
    folder.mkdir(parents=True)
    summary = {"reward_mean": mean, "reward_ci95": 0.001, "rollouts": len(rows), "examples": len(rewards)}
    (folder / "summary.json").write_text(json.dumps({**summary, "completion_tokens": 10}))
    (folder / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_report_md_gives_one_interval_for_one_number(tmp_path: Path) -> None:
    """The headline and the table give the same, clustered, interval (not the summary's unclustered one)."""
    _eval_folder(tmp_path / "eval_before", {"a": [0.0, 0.0], "b": [0.0, 0.0], "c": [0.0, 0.0]})
    _eval_folder(tmp_path / "eval_after", {"a": [0.0, 0.2], "b": [0.4, 0.6], "c": [0.3, 0.3]})
    report = write_report_md(tmp_path).read_text()
    # after: scenario means 0.1, 0.5, 0.3 (mean 0.3); residual sums -0.4, +0.4, 0 -> variance 3/2 * 0.32 / 36
    half = 4.303 * math.sqrt(1.5 * 0.32 / 36)  # = 0.497 (t with 2 degrees of freedom)
    assert f"{0.3:.3f} ± {half:.3f} after" in report
    assert f"| reward mean ± 95% CI (clustered) | 0.000 ± 0.000 | 0.300 ± {half:.3f} |" in report
    # the change, paired by scenario: differences 0.1, 0.5, 0.3: mean 0.3, sd 0.2, 4.303 * 0.2 / sqrt(3)
    assert f"change +0.300 ± {4.303 * 0.2 / math.sqrt(3):.3f}" in report
    assert "0.001" not in report


def test_report_md_pairs_the_first_decision(tmp_path: Path) -> None:
    """Beside the reward, report.md gives the trained model minus each earlier evaluation in how often the
    first decision (the level-0 requirements) is right, paired by scenario, by hand."""

    def folder(name: str, right: dict[str, list[bool]]) -> None:
        rows = [
            {
                "info": {"scenario": scenario},
                "reward": 0.5 * ok,
                "prompt": scenario,
                "completion": [{"role": "assistant", "content": "ok"}],
                "multistep": {"results": [{"name": "safety", "level": 0, "correct": ok}]},
            }
            for scenario, oks in right.items()
            for ok in oks
        ]
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(
            json.dumps({"rollouts": len(rows), "examples": len(right), "completion_tokens": 1})
        )
        (tmp_path / name / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    folder("eval_before", {"a": [False], "b": [False], "c": [False]})
    folder("eval_warm_start", {"a": [True], "b": [False], "c": [False]})
    folder("eval_after", {"a": [True], "b": [True], "c": [False]})
    (tmp_path / "probe.json").write_text("[]")
    report = write_report_md(tmp_path).read_text()
    # per-scenario differences against the warm start: 0, 1, 0 (mean 1/3, sd 0.577); against untrained 1, 1, 0
    half = 4.303 * math.sqrt(1 / 3) / math.sqrt(3)
    assert (
        f"- first decision right, trained minus warm start only: +0.333 ± {half:.3f} over 3 scenarios"
        in report
    )
    assert f"- first decision right, trained minus untrained: +0.667 ± {half:.3f} over 3 scenarios" in report
