"""Resuming an evaluation that was stopped: what its folder records (``job.json``) and what it already holds
(the finished groups of ``rollouts.jsonl``).

``rubric-grpo eval --out DIR`` writes each example's group of rollouts to ``DIR/rollouts.jsonl`` the moment
it is scored, in one write, flushed (``GroupWriter``): a kill at any moment leaves every finished group in
the file, and at most the group being written cut short. Run again on the same DIR, the job reads the file
back (``read_finished``), cuts off a torn tail (a last line without its newline, or a group with fewer than
``n`` lines), takes out the groups with an errored rollout (their examples are not done), and plays only the
examples with no group left: nothing written is generated or judged twice.

``job.json`` records the settings the results depend on (``JobRecord.settings``: the environment's, the
model's, the sampling's, and a fingerprint of every input file), and the wall time spent so far. A rerun
with other settings is refused, naming them, unless it starts over (``--fresh``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.evaluation.result import EvalFolder
from envs.examples import Example
from envs.rollout import ScoredRollout

FSYNC_EVERY_S = 1.0
"""A write at least this long after the last ``fsync`` syncs the file again (and closing it does): a kill of
the process loses nothing flushed; a crash of the machine, at most the groups written since the last sync."""


@dataclass(frozen=True)
class Resume:
    """What the earlier sessions of an evaluation left: the rollouts of its whole groups, and their time."""

    rollouts: Sequence[ScoredRollout] = ()
    """Every rollout of a finished group, in the file's order."""
    wall_s: float = 0.0
    """Wall time the earlier sessions spent, each from its start to its last written group."""
    dropped_bytes: int = 0
    """Bytes of a torn tail cut off the file (a line or group a kill cut short)."""
    retried: int = 0
    """Groups taken out of the file because a rollout of theirs errored: their examples are played again."""


@dataclass(frozen=True)
class Finished:
    """The finished groups of a ``rollouts.jsonl``, and where the last one ends."""

    rollouts: list[ScoredRollout]
    """The rollouts of every whole group without an error, in the file's order."""
    errored: list[tuple[int, int]]
    """The byte range of each whole group with an errored rollout (a judge that failed, a prompt too long):
    not done, its example is to be played again."""
    end: int
    """The byte offset just after the last whole group: what follows it is a torn tail."""
    size: int
    """The file's size in bytes."""


def read_finished(path: Path, n: int) -> Finished:
    """The whole groups of ``n`` rollouts at the start of ``path`` (empty when it does not exist), read line
    by line. A last line without its newline (cut by a kill) and a last group of fewer than ``n`` lines are
    the tail, not read. A group with an errored rollout is not done: its place is kept in ``errored``.

    Raises:
        ValueError: naming the file and the line: a complete line that is not a scored rollout, or a group
            whose lines name two examples (a file not written ``n`` rollouts per group)."""
    if not path.exists():
        return Finished([], [], 0, 0)
    rollouts: list[ScoredRollout] = []
    errored: list[tuple[int, int]] = []
    group: list[ScoredRollout] = []
    offset = end = 0
    with path.open("rb") as lines:
        for lineno, raw in enumerate(lines, 1):
            if not raw.endswith(b"\n"):
                break  # torn by a kill mid-write
            offset += len(raw)
            if not raw.strip():
                continue
            rollout = _rollout(path, lineno, raw)
            if group and rollout.scenario != group[0].scenario:
                raise ValueError(
                    f"{path}: line {lineno}: example {rollout.scenario!r} starts before the {n} rollouts of "
                    f"{group[0].scenario!r} end (not a file of {n} rollouts per example)"
                )
            group.append(rollout)
            if len(group) == n:
                if any(r.error for r in group):
                    errored.append((end, offset))
                else:
                    rollouts += group
                group, end = [], offset
    return Finished(rollouts, errored, end, path.stat().st_size)


def _rollout(path: Path, lineno: int, raw: bytes) -> ScoredRollout:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"{path}: line {lineno}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: line {lineno}: not a JSON object")
    try:
        return ScoredRollout.from_dict(data)
    except ValueError as exc:
        raise ValueError(f"{path}: line {lineno}: {exc}") from None


def still_to_run(examples: Sequence[Example], done: Sequence[ScoredRollout], n: int) -> list[Example]:
    """The examples with no finished group in ``done`` (an example named twice needs two groups).

    Raises:
        ValueError: ``done`` holds an example that ``examples`` does not (another dataset's results)."""
    groups = Counter(r.scenario for r in done[::n]) if n > 0 else Counter()
    unknown = set(groups) - {e.name for e in examples}
    if unknown:
        raise ValueError(
            f"the rollouts already written name an example not in the data: {sorted(unknown)[0]!r} (give "
            "--fresh to start over)"
        )
    left = []
    for example in examples:
        if groups[example.name] > 0:
            groups[example.name] -= 1
        else:
            left.append(example)
    return left


def in_example_order(rollouts: Sequence[ScoredRollout], examples: Sequence[Example]) -> list[ScoredRollout]:
    """``rollouts`` in the order of their examples (each group's own order kept): the order a summary is
    computed in, so that it does not depend on which groups finished first, or in which session."""
    rank: dict[str, int] = {}
    for i, example in enumerate(examples):
        rank.setdefault(example.name, i)
    return sorted(rollouts, key=lambda r: rank.get(r.scenario, len(rank)))


class GroupWriter:
    """Appends groups of rollouts to ``rollouts.jsonl``: each group in one write, flushed at once; synced to
    disk at most ``FSYNC_EVERY_S`` apart, and on close."""

    def __init__(self, path: Path, append: bool) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = path.open("a" if append else "w", encoding="utf-8")
        """The open file."""
        self.synced = time.monotonic()
        """When it was last synced."""

    def write(self, group: Sequence[ScoredRollout]) -> None:
        """One group, whole."""
        self.handle.write("".join(json.dumps(r.to_dict(), default=str) + "\n" for r in group))
        self.handle.flush()
        if time.monotonic() - self.synced >= FSYNC_EVERY_S:
            os.fsync(self.handle.fileno())
            self.synced = time.monotonic()

    def close(self) -> None:
        """Sync and close."""
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()


def fingerprint(path: str) -> str:
    """The SHA-256 of a file, or of a folder's files (their relative paths and contents, in sorted order);
    the path itself when nothing is there (a dataset repository's name)."""
    root = Path(path)
    if not root.exists():
        return f"name:{path}"
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    digest = hashlib.sha256()
    for file in files:
        digest.update(str(file.relative_to(root) if root.is_dir() else "").encode() + b"\0")
        with file.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class JobRecord:
    """``job.json``: what a folder's results depend on, and the time spent on them."""

    settings: dict[str, Any]
    """Every setting the results depend on (JSON values), compared on resume."""
    wall_s: float = 0.0
    """Wall time of the sessions before ``started``, each to its last written group."""
    started: float | None = None
    """When the latest session started (seconds since the epoch; None once it ended)."""

    def save(self, path: Path) -> None:
        """Write it whole or not at all (a temporary file, synced, renamed over the old one)."""
        tmp = path.with_name(path.name + ".tmp")
        data = {"settings": self.settings, "wall_s": self.wall_s, "started": self.started}
        with tmp.open("w", encoding="utf-8") as handle:
            handle.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> JobRecord:
        """Read back ``save``'s file.

        Raises:
            ValueError: naming the file and the field that does not read."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            settings, wall_s, started = data["settings"], float(data["wall_s"]), data["started"]
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{path}: does not read as an evaluation's job record: {exc}") from None
        except KeyError as exc:
            raise ValueError(f"{path}: field {exc.args[0]!r} is missing") from None
        if not isinstance(settings, dict) or not math.isfinite(wall_s):
            raise ValueError(f"{path}: field 'settings' is not an object, or 'wall_s' not a number")
        return cls(settings, wall_s, None if started is None else float(started))


def differences(ours: Mapping[str, Any], theirs: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The settings that differ, as ``name: A here, B in the folder`` (nested settings as ``a.b``)."""
    out = []
    for key in sorted(set(ours) | set(theirs)):
        mine, recorded = ours.get(key), theirs.get(key)
        if isinstance(mine, dict) and isinstance(recorded, dict):
            out += differences(mine, recorded, f"{prefix}{key}.")
        elif mine != recorded:
            out.append(f"{prefix}{key}: {json.dumps(mine)} here, {json.dumps(recorded)} in the folder")
    return out


def begin(folder: EvalFolder, settings: dict[str, Any], n: int, fresh: bool) -> Resume | None:
    """Start a session of the evaluation in ``folder``: with ``fresh`` (or nothing there yet) from nothing,
    else after the finished groups it holds, its torn tail cut off. Records ``settings`` and the session's
    start in ``job.json``. Returns what is resumed (None when starting from nothing).

    Raises:
        ValueError: naming the folder: it holds results with other settings (each named), or results with
            no ``job.json``; or a line of its ``rollouts.jsonl`` does not read."""
    settings = json.loads(json.dumps(settings, default=str))  # as it reads back from the file
    has_results = folder.rollouts.exists() and folder.rollouts.stat().st_size > 0
    if fresh or not has_results:  # the old results go before the new record: never paired with it
        folder.rollouts.unlink(missing_ok=True)
        JobRecord(settings, 0.0, time.time()).save(folder.job)
        return None
    if not folder.job.exists():
        raise ValueError(
            f"--out: {folder.path} holds {folder.rollouts.name} with no {folder.job.name} (not a resumable "
            "evaluation's): give --fresh to start over there, or another --out"
        )
    record = JobRecord.load(folder.job)
    changed = differences(settings, record.settings)
    if changed:
        raise ValueError(
            f"--out: {folder.path} holds an evaluation with other settings ({'; '.join(changed)}): give "
            "--fresh to start over there, or another --out"
        )
    finished = read_finished(folder.rollouts, n)
    wall_s = record.wall_s
    if record.started is not None and has_results:  # the last session's time, to its last written group
        wall_s += max(0.0, folder.rollouts.stat().st_mtime - record.started)
    if finished.errored:
        _without(folder.rollouts, finished)
    elif finished.end < finished.size:
        os.truncate(folder.rollouts, finished.end)
    JobRecord(settings, wall_s, time.time()).save(folder.job)
    return Resume(finished.rollouts, wall_s, finished.size - finished.end, len(finished.errored))


def _without(path: Path, finished: Finished) -> None:
    """Rewrite ``path`` as its whole groups without the errored ones: a copy, synced, renamed over it (a
    kill before the rename leaves the file as it was)."""
    tmp = path.with_name(path.name + ".tmp")
    with path.open("rb") as source, tmp.open("wb") as copy:
        at = 0
        for start, stop in [*finished.errored, (finished.end, finished.end)]:
            copy.write(source.read(start - at))
            source.seek(stop)
            at = stop
        copy.flush()
        os.fsync(copy.fileno())
    os.replace(tmp, path)


def end(folder: EvalFolder, wall_s: float) -> None:
    """Record in ``job.json`` that the evaluation finished, after ``wall_s`` seconds in all."""
    record = JobRecord.load(folder.job)
    JobRecord(record.settings, wall_s, None).save(folder.job)
