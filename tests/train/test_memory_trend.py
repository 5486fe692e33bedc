"""The slope of a run's memory over its steps (``train.memory_trend``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from train.memory_trend import main, memory_slopes, per_step, slope


def test_the_slope_is_least_squares() -> None:
    assert slope([(1, 2.0), (2, 2.5), (3, 3.0)]) == pytest.approx(0.5)
    # noise around a flat line: the fit, not the last minus the first
    assert slope([(1, 5.0), (2, 5.2), (3, 4.8), (4, 5.0)]) == pytest.approx(-0.04)
    with pytest.raises(ValueError, match="two distinct steps"):
        slope([(3, 1.0), (3, 2.0)])


def rows() -> list[dict[str, float]]:
    """Ten steps whose RSS climbs 0.1 GiB a step after a jump at step 4, an evaluation row between steps
    (no memory), and step 10 logged twice (a resume): the second wins."""
    out: list[dict[str, float]] = [{"step": 0, "eval/reward_mean": 0.1}]
    for step in range(1, 11):
        rss = 1.0 if step < 4 else 2.0 + 0.1 * (step - 4)
        out.append({"step": step, "memory/rss_gib": rss, "memory/peak_rss_gib": rss})
        out.append({"step": step, "eval/reward_mean": 0.2})
    out.append({"step": 10, "memory/rss_gib": 2.6})
    return out


def test_the_last_steps_slope_and_what_it_spans() -> None:
    assert per_step(rows(), "memory/rss_gib")[10] == 2.6
    slopes = memory_slopes(rows(), last=7)
    assert list(slopes) == ["memory/rss_gib"]  # the peak is not trended; no GPU here
    rss = slopes["memory/rss_gib"]
    assert rss["steps"] == [4, 10] and rss["first_gib"] == 2.0 and rss["last_gib"] == 2.6
    assert rss["gib_per_step"] == pytest.approx(0.1)
    assert memory_slopes(rows())["memory/rss_gib"]["gib_per_step"] > 0.1  # the jump counts when included
    assert memory_slopes(rows()[:3]) == {}  # one step: no slope


def test_the_command_prints_the_slopes_of_a_run_folder(tmp_path: Path, capsys) -> None:
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows()))
    main([str(tmp_path), "--last", "7"])
    printed = json.loads(capsys.readouterr().out)
    assert printed["memory/rss_gib"]["gib_per_step"] == pytest.approx(0.1)
