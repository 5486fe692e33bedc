"""A synth run killed inside any of its writes resumes to the outputs of a run never interrupted; a damaged
record is named, set aside and redone; outputs get the user's umask.

The kill is injected, not timed: a child process runs ``rubric-grpo synth`` with ``os.replace`` wrapped so
that the chosen write truncates its temporary file to half (the bytes a kill mid-write leaves) and ends the
process with ``os._exit`` before the rename."""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.envs.synth.helpers import PHRASES, ROADSIDE, run
from tests.envs.synth.test_resume import _outputs
from tests.support.judge_server import JudgeServer
from tests.support.synth_server import ScenarioWriter

N = 6
BEHAVIOURS = {2: "off_path_repaired", 4: "ideal_fail"}
REPO = Path(__file__).parents[3]

KILLER = """
import os, sys
from pathlib import Path

target, nth, replace, seen = sys.argv[1], int(sys.argv[2]), os.replace, [0]

def dying_replace(src, dst, *args, **kwargs):
    dst = Path(dst)
    if dst.name == target or (target == "record" and dst.parent.name == "items"):
        seen[0] += 1
        if seen[0] == nth:
            src = Path(src)
            if src.is_file():
                data = src.read_bytes()
                src.write_bytes(data[: len(data) // 2])
            os._exit(9)
    return replace(src, dst, *args, **kwargs)

os.replace = dying_replace
from train.cli import main
sys.exit(main(sys.argv[3:]))
"""
"""The child: ``python -c KILLER TARGET NTH SYNTH-ARGS...`` dies in the NTH write to a file named TARGET
(``record``: an item record)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[JudgeServer, Path]]:
    """The scripted writer's server and a whole run into a folder, made under umask 022."""
    writer = ScenarioWriter(PHRASES, BEHAVIOURS)
    with JudgeServer(writer, fault_for=writer.fault_for) as srv:
        whole = tmp_path_factory.mktemp("synth") / "whole"
        old = os.umask(0o022)
        try:
            report = run(srv.base_url, whole, n=N)
        finally:
            os.umask(old)
        assert report["counts"]["kept"] == N - 1
        yield srv, whole


def _killed_run(base_url: str, out: Path, target: str, nth: int) -> None:
    args = ["synth", str(ROADSIDE), "--n", str(N), "--out", str(out), "--base-url", base_url]
    args += ["--model", "writer", "--concurrency", "2", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.run(
        [sys.executable, "-c", KILLER, target, str(nth), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 9, f"the run was not killed in write {nth} of {target}: {child.stderr}"


@pytest.mark.parametrize(
    ("target", "nth"),
    [
        ("plan.json", 1),
        ("record", 1),
        ("record", 4),
        ("scenarios.yaml", 1),
        ("dataset", 1),
        ("report.json", 1),
    ],
)
def test_a_kill_inside_a_write_resumes_to_the_same_outputs(
    server: tuple[JudgeServer, Path], tmp_path: Path, target: str, nth: int
) -> None:
    srv, whole = server
    out = tmp_path / "killed"
    _killed_run(srv.base_url, out, target, nth)
    left = [p.name for p in out.rglob("*") if ".tmp" in p.name]
    assert left, "the kill left no temporary file: the fault was not inside the write"

    run(srv.base_url, out, n=N)

    assert _outputs(out) == _outputs(whole)
    assert not [p for p in out.rglob("*") if ".tmp" in p.name], "temporary files outlive the resume"


def test_a_damaged_record_is_named_set_aside_and_redone(
    server: tuple[JudgeServer, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    srv, whole = server
    out = tmp_path / "damaged"
    shutil.copytree(whole, out)
    items = out / "work" / "items"
    cut, other = sorted(items.glob("*.json"))[:2]
    cut.write_text(cut.read_text()[:40])  # a record cut short
    record = json.loads(other.read_text())
    other.write_text(json.dumps({**record, "id": "someone-else"}))  # another item's record
    (out / "report.json").unlink()
    before = len(srv.requests)

    with caplog.at_level(logging.WARNING, logger="envs.synth.pipeline"):
        run(srv.base_url, out, n=N)

    damaged = out / "work" / "damaged"
    assert sorted(p.name for p in damaged.iterdir()) == sorted([cut.name, other.name])
    assert (damaged / other.name).read_text() == json.dumps({**record, "id": "someone-else"})
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith(f"{cut}: damaged (") and str(damaged / cut.name) in m for m in messages)
    assert any(m.startswith(f"{other}: damaged (not a finished record of item") for m in messages)
    assert len(srv.requests) > before, "the damaged items were not redone"
    assert _outputs(out) == _outputs(whole)


def test_outputs_get_the_users_umask(server: tuple[JudgeServer, Path]) -> None:
    _, whole = server
    modes = {str(p.relative_to(whole)): stat.S_IMODE(p.stat().st_mode) for p in [whole, *whole.rglob("*")]}
    wrong = {
        name: oct(mode)
        for name, mode in modes.items()
        if mode != (0o755 if (whole / name).is_dir() else 0o644)
    }
    assert "dataset" in modes and "report.json" in modes and "work/items" in modes
    assert not wrong, f"not 644 (files) or 755 (folders) under umask 022: {wrong}"
