"""An evaluation's result as a type, and its folder's files: what an evaluation hands on in memory, and the
one place that reads it back from the files written for the user (``read_evaluation``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.evaluation.summary import EvalSummary
from envs.rollout import ScoredRollout

ROLLOUTS_FILE = "rollouts.jsonl"
SUMMARY_FILE = "summary.json"
PLOT_FILE = "eval.png"
REPORT_FILE = "report.md"
JOB_FILE = "job.json"


@dataclass(frozen=True)
class EvalFolder:
    """The files of one evaluation's folder: a run's ``eval_*/``, or ``rubric-grpo eval --out``."""

    path: Path
    """The folder."""

    @property
    def rollouts(self) -> Path:
        """Every scored rollout, one JSON line each (``ScoredRollout.to_dict``), written as groups finish."""
        return self.path / ROLLOUTS_FILE

    @property
    def summary(self) -> Path:
        """``Evaluation.as_dict``: the summary's fields and the environment's numbers."""
        return self.path / SUMMARY_FILE

    @property
    def plot(self) -> Path:
        """The depth and reward distributions (``plot_summary``)."""
        return self.path / PLOT_FILE

    @property
    def report(self) -> Path:
        """``rubric-grpo eval``'s environment sections (e.g. per-tag scores), when it has any."""
        return self.path / REPORT_FILE

    @property
    def job(self) -> Path:
        """``rubric-grpo eval``'s settings and time so far, which a rerun resumes from
        (``envs.evaluation.resumable``)."""
        return self.path / JOB_FILE


@dataclass(frozen=True)
class Evaluation:
    """One finished evaluation: what it measured and every rollout it scored."""

    summary: EvalSummary
    """The statistics over the scored rollouts."""
    metrics: dict[str, float]
    """The environment's own numbers (``Environment.summary_metrics``, e.g. ``healthbench/overall``)."""
    rollouts: list[ScoredRollout]
    """Every scored rollout, in the order the groups finished (as ``rollouts.jsonl`` holds them)."""

    def as_dict(self) -> dict[str, Any]:
        """What ``summary.json`` holds: the summary's fields, then the environment's numbers."""
        return {**self.summary.as_dict(), **self.metrics}


def read_evaluation(folder: EvalFolder) -> Evaluation:
    """The evaluation written to ``folder``. Numeric keys of ``summary.json`` beyond the summary's fields are
    the environment's numbers; any other key (``job`` of ``rubric-grpo eval``) is not part of the result.

    Raises:
        FileNotFoundError: ``summary.json`` or ``rollouts.jsonl`` is missing.
        ValueError: naming the file, and the field or line, that does not read."""
    try:
        data = json.loads(folder.summary.read_text(encoding="utf-8"))
        summary = EvalSummary.from_dict(data)
    except KeyError as exc:
        raise ValueError(f"{folder.summary}: field {exc.args[0]!r} is missing") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{folder.summary}: does not read as an evaluation summary: {exc}") from None
    known = set(EvalSummary.__dataclass_fields__) | {"tokens_per_s"}
    metrics = {k: float(v) for k, v in data.items() if k not in known and isinstance(v, int | float)}
    rollouts = []
    for lineno, line in enumerate(folder.rollouts.read_text(encoding="utf-8").splitlines(), 1):
        if not line:
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{folder.rollouts}: line {lineno}: not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{folder.rollouts}: line {lineno}: not a JSON object")
        try:
            rollouts.append(ScoredRollout.from_dict(data))
        except ValueError as exc:
            raise ValueError(f"{folder.rollouts}: line {lineno}: {exc}") from None
    return Evaluation(summary, metrics, rollouts)
