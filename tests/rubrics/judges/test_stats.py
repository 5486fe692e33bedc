"""A judge client's counters as flat metrics, and what one step added to them."""

from __future__ import annotations

from rubrics.judges.stats import JudgeClientStats, snapshot_delta


def test_snapshot_delta_counts_a_new_key_from_zero() -> None:
    assert snapshot_delta({"judge/calls": 2.0}, {"judge/calls": 5.0, "judge/seconds": 1.5}) == {
        "judge/calls": 3.0,
        "judge/seconds": 1.5,
    }


def test_faults_are_metrics_by_cause_and_a_step_counts_its_own() -> None:
    stats = JudgeClientStats(calls=3, requests=5, retries=2, failures=1)
    stats.faults.update({"timeout": 1, "connection": 1})
    before = stats.snapshot()
    assert before["judge/faults/timeout"] == 1.0 and before["judge/faults/connection"] == 1.0
    stats.faults["malformed"] += 2
    stats.retries += 2
    step = stats.since(before)
    assert step["judge/faults/malformed"] == 2.0 and step["judge/faults/timeout"] == 0.0
    assert step["judge/retries"] == 2.0 and step["judge/calls"] == 0.0
