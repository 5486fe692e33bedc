"""``report.png``: the panels, their curves and lines (hand-derived values), and the PNG itself."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rubrics.multistep.probe import PolicyScore
from train.report_png import figure_data, panel_keys, read_metrics, write_report_png
from train.run_folder import RunFolder


def _synthetic_metrics(path: Path, steps: int = 12) -> None:
    with path.open("w") as fh:
        for step in range(1, steps + 1):
            row = {
                "step": step,
                "wall_time": 1000.0 + step,
                "reward/mean": 0.1 + 0.03 * step,
                "reward/std": 0.2,
                "reward/first_aid_rules": 0.05 * step,
                "requirement/call_ems/pass_rate": min(1.0, 0.1 * step),
                "requirement/check_breathing/pass_rate": 0.3,
                "depth/mean": 1 + step / 12,
                "policy/kl": 0.001 * step,
                "policy/clip_fraction": 0.02,
                "policy/entropy": 2.0 - 0.05 * step,
                "length/completion_tokens_mean": 60 + step,
                "turns/mean": 3.0,
                "diversity/distinct_fraction": 1.0,
                "diversity/repetition_rate": 0.0,
                "time/generate_s": 20.0,
                "time/train_s": 5.0,
                "throughput/tokens_per_s": 150.0,
                "advantage/zero_var_fraction": 0.25,
                "loss/total": math.sin(step),
                "mystery": 1.0,
            }
            if step == 5:
                row["policy/kl"] = None  # a NaN written as null is skipped
            fh.write(json.dumps(row) + "\n")
        # a step logged again after a resume: the last line wins
        fh.write(json.dumps({"step": 3, "wall_time": 2000.0, "reward/mean": 0.9}) + "\n")


def test_write_report_makes_a_png(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    _synthetic_metrics(metrics)
    out = write_report_png(RunFolder(tmp_path))
    assert out == tmp_path / "report.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 20_000

    rows = read_metrics(metrics)
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert rows[2] == {"step": 3, "wall_time": 2000.0, "reward/mean": 0.9}


def test_panel_assignment() -> None:
    keys = [
        "step",
        "wall_time",
        "reward/mean",
        "reward/std",
        "reward_fn/keywords",
        "req/call_ems",
        "req/scene_safety",
        "credit/scene_safety/advantage_abs",
        "credit/scene_safety/replies",
        "depth/mean",
        "train/kl/mean",
        "train/clip/low_frac",
        "train/is/ratio_mean",
        "train/entropy",
        "train/loss",
        "length/completion_tokens_mean",
        "length/truncated_fraction",
        "time/wait_s",
        "time/train_s",
        "time/sync_s",
        "time/rollout_judge_s",
        "tokens_per_s/generate",
        "memory/peak_rss_gib",
        "eval/reward_mean",
        "eval/reward_ci95",
        "eval/completion_tokens",
        "eval_final/reward_mean",
        "rollouts",
    ]
    # the few panels a researcher reads first, in reading order; every other key is left to wandb
    assert panel_keys(keys) == {
        "Held-out evaluation": ["eval/reward_mean", "eval_final/reward_mean"],
        "Training reward (mean ± std)": ["reward/mean"],
        "Requirement pass rates": ["req/call_ems", "req/scene_safety"],
        "Mean |advantage| per requirement node (credit per reply)": ["credit/scene_safety/advantage_abs"],
        "KL and clipping": ["train/clip/low_frac", "train/kl/mean"],
        "Lengths (tokens)": ["length/completion_tokens_mean"],
        "Time split (s per step)": ["time/sync_s", "time/train_s", "time/wait_s"],
        "Memory (GiB)": ["memory/peak_rss_gib"],
    }


def _three_step_run(run: Path) -> Path:
    """The lines a 3-step run with ``logging.eval_every=2`` writes: the evaluation before training at step 0,
    each step's training metrics, an evaluation after step 2, and the final evaluation at step 3."""
    lines = [{"step": 0, "eval/reward_mean": 0.10, "eval/reward_ci95": 0.05, "eval/completion_tokens": 3500}]
    for step in (1, 2, 3):
        lines.append(
            {"step": step, "reward/mean": 0.1 * step, "reward/std": 0.2, "req/call_ems": 0.25 * step}
        )
        if step == 2:
            lines.append({"step": 2, "eval/reward_mean": 0.20, "eval/reward_ci95": 0.06})
    lines.append({"step": 3, "eval_final/reward_mean": 0.30, "eval_final/reward_ci95": 0.07})
    run.mkdir(parents=True, exist_ok=True)
    metrics = run / "metrics.jsonl"
    metrics.write_text("".join(json.dumps({**line, "wall_time": 1.0}) + "\n" for line in lines))
    return metrics


def test_the_last_step_is_drawn(tmp_path: Path) -> None:
    """The final evaluation is logged at the last step after its training metrics: both are drawn."""
    rows = read_metrics(_three_step_run(tmp_path / "run"))
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert rows[3]["reward/mean"] == pytest.approx(0.3) and rows[3]["eval_final/reward_mean"] == 0.30
    panels = figure_data(rows)
    (reward,) = panels["Training reward (mean ± std)"].series
    assert reward.steps == [1, 2, 3] and reward.band == [0.2, 0.2, 0.2]
    assert panels["Requirement pass rates"].series[0].steps == [1, 2, 3]
    (held_out,) = panels["Held-out evaluation"].series  # completion tokens are not on the reward's axis
    assert (held_out.steps, held_out.values, held_out.errors) == (
        [0, 2, 3],
        [0.10, 0.20, 0.30],
        [0.05, 0.06, 0.07],
    )


def test_held_out_panel_draws_the_logged_interval_and_trivial_policies(tmp_path: Path) -> None:
    """The error bars are the logged ``reward_ci95`` (the evaluation's clustered interval), a 0.0 included;
    an interval that could not be computed (logged as null) is drawn as none."""
    run = tmp_path / "run"
    metrics = _three_step_run(run)
    lines = metrics.read_text().splitlines()
    lines[-1] = lines[-1].replace('"eval_final/reward_ci95": 0.07', '"eval_final/reward_ci95": 0.0')
    lines.append(
        json.dumps({"step": 3, "eval_warm_start/reward_mean": 0.2, "eval_warm_start/reward_ci95": None})
    )
    metrics.write_text("\n".join(lines) + "\n")
    probe = [PolicyScore("majority", reward_mean=0.25)]
    panel = figure_data(read_metrics(metrics), probe)["Held-out evaluation"]
    assert panel.lines == {"majority": 0.25}
    held_out, warm = panel.series
    assert held_out.errors == [0.05, 0.06, 0.0]
    assert warm.values == [0.2] and math.isnan(warm.errors[0])
    assert write_report_png(RunFolder(run), probe).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_empty_metrics_still_make_a_png(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("")
    out = write_report_png(RunFolder(tmp_path))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
