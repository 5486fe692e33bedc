"""``scripts/compare_runs.py``: two run folders compared key by key, timings and the wandb run id aside."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "compare_runs.py"


def _run(root: Path, reward: float, seconds: float, run_id: str) -> Path:
    (root / "eval_before").mkdir(parents=True)
    rows = [{"step": 1, "reward/mean": reward, "time/train_s": seconds, "wall_time": seconds}]
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = {"reward": reward, "timing": {"total_ms": seconds}}
    (root / "eval_before" / "summary.json").write_text(json.dumps(summary))
    state = {"step": 1, "saved_at": seconds, "extra": {"cursor": {"position": 2}, "wandb_run_id": run_id}}
    (root / "trainer_state.json").write_text(json.dumps(state))
    return root


def _compare(before: Path, after: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(SCRIPT), str(before), str(after)]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_runs_that_differ_only_in_time_and_run_id_compare_equal(tmp_path: Path) -> None:
    before = _run(tmp_path / "a", 0.25, 1.5, "abc")
    after = _run(tmp_path / "b", 0.25, 9.0, "xyz")
    done = _compare(before, after)
    # metrics: step, reward/mean (2); summary: reward (1); trainer state: step, extra (2)
    assert done.returncode == 0 and done.stdout.strip().endswith("5 keys compared, 0 differences")


def test_a_moved_number_and_a_missing_file_are_named(tmp_path: Path) -> None:
    before = _run(tmp_path / "a", 0.25, 1.5, "abc")
    after = _run(tmp_path / "b", 0.5, 1.5, "abc")
    (after / "eval_before" / "summary.json").unlink()
    done = _compare(before, after)
    assert done.returncode == 1
    assert "metrics.jsonl record 0 reward/mean: 0.25 then 0.5" in done.stdout
    assert "eval_before/summary.json: missing in" in done.stdout
