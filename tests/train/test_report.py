"""The PNG report and the diversity metrics (hand-derived values)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from train.report import figure_data, panel_keys, read_metrics, write_report
from train.rollout_metrics import diversity_metrics
from train.summary import write_summary


def test_diversity_metrics_hand_derived() -> None:
    texts = [
        "Call EMS now.",  # words: call ems now -> bigrams (call ems) (ems now)
        "  Call   EMS now. ",  # the same text after whitespace normalisation; the same two bigrams
        "stop stop stop stop stop stop",  # 5 bigrams (stop stop); the 4-gram (stop x4) occurs 3 times
        "call EMS",  # a different text; bigram (call ems) again
    ]
    metrics = diversity_metrics(texts)
    # distinct texts: "Call EMS now.", "stop stop ...", "call EMS" -> 3 of 4
    assert metrics["distinct_fraction"] == 3 / 4
    # bigrams: 2 + 2 + 5 + 1 = 10; distinct: (call ems), (ems now), (stop stop) = 3
    assert metrics["distinct_2"] == 3 / 10
    # only the third text has a 4-gram occurring >= 3 times
    assert metrics["repetition_rate"] == 1 / 4


def test_repetition_threshold() -> None:
    twice = "a b c d a b c d"  # the 4-gram (a b c d) occurs twice: not a loop at the default threshold
    assert diversity_metrics([twice])["repetition_rate"] == 0.0
    assert diversity_metrics([twice], min_count=2)["repetition_rate"] == 1.0
    # 3-grams: (a b c) occurs twice as well; (b c d) twice; with n=3, min_count=2 it is a loop
    assert diversity_metrics([twice], n=3, min_count=2)["repetition_rate"] == 1.0


def test_diversity_edge_cases() -> None:
    assert diversity_metrics(["one", "two"]) == {
        "distinct_fraction": 1.0,
        "distinct_2": 0.0,  # no bigram at all
        "repetition_rate": 0.0,
    }
    with pytest.raises(ValueError):
        diversity_metrics([])


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
    out = write_report(metrics, tmp_path / "report" / "report.png")
    assert out == tmp_path / "report" / "report.png"
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
    (run / "probe.json").write_text(json.dumps([{"policy": "majority", "reward_mean": 0.25}]))
    panel = figure_data(read_metrics(metrics), run)["Held-out evaluation"]
    assert panel.lines == {"majority": 0.25}
    held_out, warm = panel.series
    assert held_out.errors == [0.05, 0.06, 0.0]
    assert warm.values == [0.2] and math.isnan(warm.errors[0])
    assert write_report(metrics, run / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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
    report = write_summary(tmp_path).read_text()
    # after: scenario means 0.1, 0.5, 0.3 (mean 0.3); residual sums -0.4, +0.4, 0 -> variance 3/2 * 0.32 / 36
    half = 4.303 * math.sqrt(1.5 * 0.32 / 36)  # = 0.497 (t with 2 degrees of freedom)
    assert f"{0.3:.3f} ± {half:.3f} after" in report
    assert f"| reward mean ± 95% CI (clustered) | 0.000 ± 0.000 | 0.300 ± {half:.3f} |" in report
    # the change, paired by scenario: differences 0.1, 0.5, 0.3: mean 0.3, sd 0.2, 4.303 * 0.2 / sqrt(3)
    assert f"change +0.300 ± {4.303 * 0.2 / math.sqrt(3):.3f}" in report
    assert "0.001" not in report


def test_empty_metrics_still_make_a_png(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("")
    out = write_report(metrics, tmp_path / "report.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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
    report = write_summary(tmp_path).read_text()
    # per-scenario differences against the warm start: 0, 1, 0 (mean 1/3, sd 0.577); against untrained 1, 1, 0
    half = 4.303 * math.sqrt(1 / 3) / math.sqrt(3)
    assert (
        f"- first decision right, trained minus warm start only: +0.333 ± {half:.3f} over 3 scenarios"
        in report
    )
    assert f"- first decision right, trained minus untrained: +0.667 ± {half:.3f} over 3 scenarios" in report
