"""A judge client's counters as flat metrics, and what one step added to them."""

from __future__ import annotations

from rubrics.judges.stats import snapshot_delta


def test_snapshot_delta_counts_a_new_key_from_zero() -> None:
    assert snapshot_delta({"judge/calls": 2.0}, {"judge/calls": 5.0, "judge/seconds": 1.5}) == {
        "judge/calls": 3.0,
        "judge/seconds": 1.5,
    }
