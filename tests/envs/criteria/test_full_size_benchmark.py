"""``benchmarks/criteria_full_size.py`` at a tiny size, so that it cannot rot: the generated HealthBench file
loads whole in each format, the preflight passes on it, every criterion is one judge request, and an
evaluation killed partway resumes without judging again what was written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.criteria_full_size import criteria_counts, write_dataset
from envs.criteria.data import load_criteria_examples
from tests.support.judge_server import token_count

ROOT = Path(__file__).resolve().parents[3]


def test_the_generated_file_is_healthbench_with_the_criteria_asked_for(tmp_path: Path) -> None:
    counts = criteria_counts(10, 96)
    assert sum(counts) == 96 and min(counts) >= 1 and len(set(counts)) > 1  # uneven, as real data is
    files = write_dataset(tmp_path, 10, 96, seed=0)
    first = json.loads(files["jsonl"].read_text().splitlines()[0])
    assert {"prompt_id", "prompt", "rubrics", "example_tags", "ideal_completions_data"} <= set(first)
    assert token_count(first["rubrics"][0]["criterion"]) >= 15
    for path in files.values():
        examples = load_criteria_examples(path, format="healthbench")
        assert [len(e.criteria) for e in examples] == counts
        assert any(c.weight < 0 for e in examples for c in e.criteria)
        assert examples[0].reference_answer and examples[1].reference_answer is None


@pytest.mark.slow
def test_the_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    command = [sys.executable, "benchmarks/criteria_full_size.py", "--examples", "20", "--criteria", "150"]
    command += ["--latency", "0.01", "--concurrency", "8", "--score-examples", "10", "--out", str(tmp_path)]
    command += ["--stages", "load,preflight,scoring"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    for stage in ("load", "preflight"):
        for kind in result["formats"]:
            assert result[stage][kind]["seconds"] > 0 and result[stage][kind]["file_mib"] > 0
    assert result["load"]["jsonl"]["examples"] == 20
    scoring = result["scoring"]
    assert scoring["examples"] == 10 and scoring["calls"] == sum(criteria_counts(20, 150)[:10])
    assert scoring["requests"] == scoring["calls"] and scoring["retries"] == 0
    assert scoring["ideal_s"] == pytest.approx(scoring["calls"] * 0.01 / 8, abs=1e-4)


@pytest.mark.slow
def test_the_resume_stage_runs_at_a_tiny_size(tmp_path: Path) -> None:
    """Killed halfway and resumed, the evaluation judges each criterion once, apart from those of the
    examples being judged when the kill came."""
    command = [sys.executable, "benchmarks/criteria_full_size.py", "--examples", "20", "--criteria", "60"]
    command += ["--latency", "0.2", "--concurrency", "4", "--stages", "resume", "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    resume = json.loads(done.stdout)["resume"]
    assert 10 <= resume["written_before_kill"] < 20
    assert resume["calls_for_examples_already_written"] == 0
    lost = resume["calls_before_kill_lost"]
    assert resume["judge_calls_before_kill"] + resume["judge_calls_resumed"] == 60 + lost
    assert resume["summary_examples"] == resume["summary_rollouts"] == 20
