"""``rubric-grpo eval --out DIR`` resumes: the real command, killed by SIGKILL in a subprocess partway through
a criteria dataset judged by a real HTTP judge, then run again on the same folder, sends the judge nothing
for the examples already written, cuts off a torn tail, and ends with the summary of a run never stopped;
a folder with other settings is refused, naming them, and ``--fresh`` starts over."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from envs.evaluation.resumable import read_finished
from tests.support.judge_server import JudgeServer
from train.cli import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = 8
N = 2


def verdict(body: dict[str, Any]) -> str:
    """MET or UNMET by a hash of the request: the verdict follows the reply, as a real judge's would."""
    met = hashlib.sha256(json.dumps(body["messages"]).encode()).digest()[0] % 2 == 0
    return json.dumps({"explanation": "Judged.", "criterion_status": "MET" if met else "UNMET"})


def judged_examples(requests: list[dict[str, Any]]) -> set[int]:
    """The examples the judge was asked about (each criterion names its example: ``topic eK``)."""
    return {int(m) for r in requests for m in re.findall(r"topic e(\d+)\b", json.dumps(r["messages"]))}


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """Criteria without rules (an LLM judge grades each), two per example."""
    path = tmp_path / "data.jsonl"
    rows = [
        {
            "id": f"ex{i}",
            "prompt": f"Question {i}: what should I do about a burn?",
            "criteria": [
                {
                    "weight": 3,
                    "requirement": f"Mentions cool water for topic e{i}",
                    "tags": ["axis:accuracy"],
                },
                {"weight": -2, "requirement": f"Suggests ice for topic e{i}", "tags": ["axis:safety"]},
            ],
        }
        for i in range(EXAMPLES)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def eval_args(data: Path, model: Path, base_url: str, out: Path) -> list[str]:
    args = ["eval", "--criteria", str(data), "--model", str(model), "--n", str(N), "--max-tokens", "4"]
    args += ["--max-turns", "1", "--temperature", "0", "--concurrency", "1", "--judge-base-url", base_url]
    return [*args, "--judge-model", "judge", "--out", str(out), "--no-progress"]


def kill_after(args: list[str], rollouts: Path, lines: int) -> None:
    """The command in a subprocess, killed by SIGKILL once ``rollouts`` holds ``lines`` lines."""
    log = rollouts.parent.with_name(rollouts.parent.name + ".log")
    rollouts.parent.mkdir(parents=True)
    with log.open("wb") as err:
        child = subprocess.Popen(
            [sys.executable, "-m", "train.cli", *args],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        deadline = time.monotonic() + 240
        try:
            while not rollouts.exists() or rollouts.read_bytes().count(b"\n") < lines:
                assert child.poll() is None, f"the run ended before it was killed: {log.read_text()}"
                assert time.monotonic() < deadline, "the run wrote too little in 240 s"
                time.sleep(0.02)
            child.send_signal(signal.SIGKILL)
        finally:
            child.kill()
            child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL


def comparable(out: Path) -> dict[str, Any]:
    """summary.json without its times and the job's folder and flags."""
    summary = json.loads((out / "summary.json").read_text())
    return {k: v for k, v in summary.items() if k not in ("job", "wall_s", "tokens_per_s")}


def test_a_killed_eval_resumes_without_judging_anything_twice(
    tiny_model_dir: Path, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with JudgeServer(responder=verdict, delay_s=0.05) as judge:
        whole = tmp_path / "whole"
        assert main(eval_args(dataset, tiny_model_dir, judge.base_url, whole)) == 0
        assert judged_examples(judge.requests) == set(range(EXAMPLES))

        out = tmp_path / "stopped"
        kill_after(eval_args(dataset, tiny_model_dir, judge.base_url, out), out / "rollouts.jsonl", 2 * N)
        finished = read_finished(out / "rollouts.jsonl", N)
        done = {int(r.scenario.removeprefix("ex")) for r in finished.rollouts}
        assert 2 <= len(done) < EXAMPLES, "the kill came too late to leave anything to resume"
        # one written example whose judge failed: an errored rollout is not done, it is played again
        failed = min(done)
        whole_groups = (out / "rollouts.jsonl").read_bytes()[: finished.end].decode()
        rows = [json.loads(x) for x in whole_groups.splitlines()]
        first = next(r for r in rows if r["info"]["scenario"] == f"ex{failed}")
        first["error"] = "judge: injected failure"
        text = "".join(json.dumps(r) + "\n" for r in rows)
        (out / "rollouts.jsonl").write_text(text)
        done.remove(failed)
        # a torn tail, as a kill inside a write leaves it: a whole line of a group, then half a line
        other = next(i for i in range(EXAMPLES) if i not in done and i != failed)
        lines = [x for x in (whole / "rollouts.jsonl").read_text().splitlines() if f'"ex{other}"' in x]
        with (out / "rollouts.jsonl").open("a") as handle:
            handle.write(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])
        capsys.readouterr()

        before = len(judge.requests)
        assert main(eval_args(dataset, tiny_model_dir, judge.base_url, out)) == 0
        resumed = judged_examples(judge.requests[before:])

    err = capsys.readouterr().err
    assert f"{len(done)} of {EXAMPLES} examples already done" in err and "cut off a torn tail" in err
    assert "1 examples with an errored rollout are played again" in err
    assert resumed == set(range(EXAMPLES)) - done  # nothing already written was judged again
    assert comparable(out) == comparable(whole)
    assert (out / "report.md").read_text() == (whole / "report.md").read_text()
    rows = read_finished(out / "rollouts.jsonl", N)
    assert rows.end == rows.size and len(rows.rollouts) == EXAMPLES * N  # each example once, whole

    # run again: everything is done, nothing is played or judged, the same summary
    with JudgeServer(responder=verdict) as idle:
        assert main(eval_args(dataset, tiny_model_dir, idle.base_url, out)) == 0
        assert idle.requests == []
    assert comparable(out) == comparable(whole)


def test_other_settings_are_refused_by_name_and_fresh_starts_over(
    tiny_model_dir: Path, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eval"
    with JudgeServer(responder=verdict) as judge:
        args = eval_args(dataset, tiny_model_dir, judge.base_url, out)
        assert main(args) == 0
        kept = (out / "rollouts.jsonl").read_bytes()
        capsys.readouterr()
        assert main([*args, "--max-tokens", "5"]) == 2
        err = capsys.readouterr().err
        assert f"--out: {out} holds an evaluation with other settings (max_tokens: 5 here, 4 in" in err
        assert "--fresh" in err
        dataset.write_text(dataset.read_text().replace("burn", "scald"))
        assert main(args) == 2
        assert "inputs.env.data: " in capsys.readouterr().err
        assert (out / "rollouts.jsonl").read_bytes() == kept  # a refusal loses nothing
        before = len(judge.requests)
        assert main([*args, "--fresh"]) == 0
        assert judged_examples(judge.requests[before:]) == set(range(EXAMPLES))
    assert len(read_finished(out / "rollouts.jsonl", N).rollouts) == EXAMPLES * N


def test_results_without_a_job_record_are_refused(tmp_path: Path, dataset: Path, capsys) -> None:
    out = tmp_path / "old"
    out.mkdir()
    (out / "rollouts.jsonl").write_text("{}\n")
    args = ["eval", "--criteria", str(dataset), "--model", str(tmp_path), "--out", str(out), "--no-progress"]
    assert main([*args, "--judge-base-url", "http://127.0.0.1:9/v1", "--judge-model", "judge"]) == 2
    err = capsys.readouterr().err
    assert f"{out} holds rollouts.jsonl with no job.json" in err and "--fresh" in err


def test_a_damaged_line_before_the_end_is_named(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    path.write_text('{"prompt": "x"}\nnot json\n')
    with pytest.raises(ValueError, match=rf"{path}: line 1: field '\w+' is missing"):
        read_finished(path, 2)
    path.write_text("[1]\n")
    with pytest.raises(ValueError, match=rf"{path}: line 1: not a JSON object"):
        read_finished(path, 1)
