"""The PNG report and the diversity metrics (hand-derived values)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from train.report import diversity_metrics, panel_keys, read_metrics, write_report


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
        "depth/mean",
        "train/kl/mean",
        "train/clip/low_frac",
        "train/is/ratio_mean",
        "train/is/truncated_frac",
        "train/entropy",
        "train/loss",
        "train/grad_norm",
        "train/learning_rate",
        "length/completion_tokens_mean",
        "length/truncated_fraction",
        "turns/mean",
        "stop/length",
        "errored_fraction",
        "advantage/std",
        "groups/zero_variance_fraction",
        "diversity/distinct_2",
        "time/train_s",
        "tokens_per_s/generate",
        "memory/peak_rss_gib",
        "eval/reward_mean",
        "eval_final/reward_mean",
        "rollouts",
    ]
    panels = panel_keys(keys)
    assert list(panels)[:3] == [
        "Reward (mean ± std)",
        "Held-out evaluation",
        "Requirements: pass rate and depth",
    ]
    assert list(panels)[-4:] == ["Time split (s per step)", "Throughput (tokens/s)", "Memory (GiB)", "Other"]
    assert panels == {
        "Reward (mean ± std)": ["reward/mean"],
        "Held-out evaluation": ["eval/reward_mean", "eval_final/reward_mean"],
        "Requirements: pass rate and depth": ["depth/mean", "req/call_ems"],
        "Reward per function": ["reward_fn/keywords"],
        "Diversity and repetition": ["diversity/distinct_2"],
        "Lengths (tokens)": ["length/completion_tokens_mean"],
        "Turns and truncation": ["length/truncated_fraction", "turns/mean"],
        "Stop reasons and errors": ["errored_fraction", "stop/length"],
        "KL and clip fractions": ["train/clip/low_frac", "train/is/truncated_frac", "train/kl/mean"],
        "Policy and importance ratios": ["train/is/ratio_mean"],
        "Entropy": ["train/entropy"],
        "Advantages and groups": ["advantage/std", "groups/zero_variance_fraction"],
        "Loss": ["train/loss"],
        "Gradient norm": ["train/grad_norm"],
        "Learning rate": ["train/learning_rate"],
        "Time split (s per step)": ["time/train_s"],
        "Throughput (tokens/s)": ["tokens_per_s/generate"],
        "Memory (GiB)": ["memory/peak_rss_gib"],
        "Other": ["rollouts"],
    }


def test_empty_metrics_still_make_a_png(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("")
    out = write_report(metrics, tmp_path / "report.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
