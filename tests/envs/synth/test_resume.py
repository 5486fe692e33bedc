"""A run killed with SIGKILL halfway resumes to exactly the output of a run that was never interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.envs.synth.helpers import PHRASES, ROADSIDE, run
from tests.support.judge_server import JudgeServer
from tests.support.synth_server import ScenarioWriter

N = 12
BEHAVIOURS = {3: "off_path_repaired", 5: "dup_exact", 9: "dup_exact", 7: "wrong_passes"}
REPO = Path(__file__).parents[3]


def _cli(base_url: str, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "train.cli",
        "synth",
        str(ROADSIDE),
        "--n",
        str(N),
        "--out",
        str(out),
        "--base-url",
        base_url,
        "--model",
        "writer",
        "--concurrency",
        "2",
        "--no-progress",
    ]


def _outputs(out: Path) -> dict[str, object]:
    from datasets import load_from_disk

    report = json.loads((out / "report.json").read_text())
    report.pop("this_run")
    data = load_from_disk(str(out / "dataset"))
    return {
        "scenarios.yaml": (out / "scenarios.yaml").read_bytes(),
        "scenarios.jsonl": (out / "scenarios.jsonl").read_bytes(),
        "hidden_descriptions.jsonl": (out / "hidden_descriptions.jsonl").read_bytes(),
        "report": report,
        "dataset": {split: data[split].to_list() for split in data},
    }


def test_sigkill_halfway_then_resume_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    writer = ScenarioWriter(PHRASES, BEHAVIOURS)
    with JudgeServer(writer, delay_s=0.1, fault_for=writer.fault_for) as server:
        whole = run(server.base_url, tmp_path / "whole", n=N)
        assert whole["counts"]["kept"] == N - 2  # a duplicate and a wrong reply that passes

        out = tmp_path / "killed"
        items = out / "work" / "items"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(
            _cli(server.base_url, out), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if items.is_dir() and len(list(items.glob("*.json"))) >= N // 2:
                break
            time.sleep(0.01)
        assert proc.poll() is None, f"the run ended before it could be killed: {proc.communicate()}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        done = {p.stem for p in items.glob("*.json")}
        assert N // 2 <= len(done) < N
        assert not (out / "report.json").exists()
        for record in items.glob("*.json"):
            json.loads(record.read_text())  # every record on disk is whole

        before = len(server.requests)
        resumed = subprocess.run(
            _cli(server.base_url, out), cwd=REPO, env=env, capture_output=True, text=True, timeout=120
        )
        assert resumed.returncode == 0, resumed.stderr
        assert "kept of 12 planned" in resumed.stdout
        redone = {writer.case(r) for r in server.requests[before:] if writer.kind(r) == "hidden"}
        plan = json.loads((out / "work" / "plan.json").read_text())
        finished_cases = {item["index"] + 1 for item in plan["items"] if item["id"] in done}
        assert redone and not (redone & finished_cases), "a finished item was generated again"
        assert redone | finished_cases == set(range(1, N + 1)), "an item was skipped"

    assert _outputs(out) == _outputs(tmp_path / "whole")
