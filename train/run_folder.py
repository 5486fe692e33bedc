"""The run folder (``logging.output_dir``) and its one owner: ``RunFolder`` knows every path of a run, and
``EvalPoint`` every name a held-out evaluation goes by (its folder and its metrics' prefix). The held-out
results the reports read stay typed in memory (``HeldOutResults``); ``read_held_out`` builds the same objects
from a finished folder's files. Layout::

    <run>/
        metrics.jsonl  samples.jsonl  wandb/  train.metrics_log (wandb/: an offline wandb run)
        eval_before/                          held-out evaluation before training (envs.evaluation.EvalFolder:
        eval_warm_start/                      rollouts.jsonl, summary.json, eval.png), after the warm start,
        eval_step_<k>/                        after step k (logging.eval_every), after the last step
        eval_after/
        eval_<...>_<set>/                     the same on each further held-out set (env.extra_eval_scenarios)
        probe.json  probe_<set>.json          the rubric probe's trivial policies on each held-out set
        warm_start/  (warm_start.json)        the warm-started model (train.warm_start)
        checkpoints/                          train.checkpoint
            step_000010/  (trainer_state.json, model/, adapter/)
            latest
        report.md  report.png                 train.report_md, train.report_png
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from envs.evaluation.result import EvalFolder, Evaluation, read_evaluation
from rubrics.multistep.probe import PolicyScore

EvalKind = Literal["before", "warm_start", "step", "after"]

_METRIC_STEMS: dict[EvalKind, str] = {
    "before": "eval",
    "warm_start": "eval_warm_start",
    "step": "eval",  # before training and every eval_every steps: one curve
    "after": "eval_final",
}
_EVAL_FOLDER = re.compile(r"^eval_(before|warm_start|after)(?:_(.+))?$")
_PROBE_FILE = re.compile(r"^probe(?:_(.+))?\.json$")
_CHECKPOINT = re.compile(r"^step_(\d+)$")


def _suffix(held_out_set: str) -> str:
    """What the name of a further held-out set adds to a folder or a metric prefix (nothing for the set)."""
    return f"_{held_out_set}" if held_out_set else ""


@dataclass(frozen=True)
class EvalPoint:
    """When a held-out evaluation ran: before training, after the warm start, after step ``step``, or after
    the last step."""

    kind: EvalKind
    """Which of the run's evaluations."""
    step: int = 0
    """The step it followed, for ``step`` (0 otherwise)."""

    def folder_name(self, held_out_set: str = "") -> str:
        """Its folder: ``eval_before``, ``eval_warm_start``, ``eval_step_<k>``, ``eval_after``, each with
        ``_<set>`` for a further held-out set."""
        stem = f"eval_step_{self.step}" if self.kind == "step" else f"eval_{self.kind}"
        return stem + _suffix(held_out_set)

    def prefix(self, held_out_set: str = "") -> str:
        """The prefix of its metrics: ``eval/`` (before training and after step k), ``eval_warm_start/``,
        ``eval_final/``, each with ``_<set>`` before the slash for a further held-out set."""
        return f"{_METRIC_STEMS[self.kind]}{_suffix(held_out_set)}/"


BEFORE = EvalPoint("before")
WARM_START = EvalPoint("warm_start")
AFTER = EvalPoint("after")


REPORTED = (BEFORE, WARM_START, AFTER)
"""The evaluations a run keeps for its reports, in the order they run. One after step k is written and
logged, not kept: a long run's memory does not grow with ``logging.eval_every``."""
_REPORTED_BY_KIND: dict[str, EvalPoint] = {point.kind: point for point in REPORTED}


def after_step(step: int) -> EvalPoint:
    """The evaluation after step ``step`` (``logging.eval_every``)."""
    return EvalPoint("step", step)


@dataclass(frozen=True)
class CheckpointFolder:
    """The files of one checkpoint (or of the staging folder it is written into)."""

    path: Path
    """The folder."""

    @property
    def trainer_state(self) -> Path:
        """The trainer's JSON state; written last, its presence marks the checkpoint complete."""
        return self.path / "trainer_state.json"

    @property
    def model(self) -> Path:
        """The plain ``save_pretrained`` model of the final checkpoint (of a LoRA run: merged)."""
        return self.path / "model"

    @property
    def adapter(self) -> Path:
        """A LoRA run's adapter, in peft's format (``train.lora``)."""
        return self.path / "adapter"

    @property
    def adapter_weights(self) -> Path:
        """The adapter's weights inside ``adapter``."""
        return self.adapter / "adapter_model.safetensors"

    def random_states(self, rank: int) -> Path:
        """Process ``rank``'s python, numpy and torch RNG states (``accelerator.save_state``)."""
        return self.path / f"random_states_{rank}.pkl"

    def optimizer_shards(self) -> list[Path]:
        """DeepSpeed ZeRO's optimiser shards, one per process that saved them (none without DeepSpeed)."""
        return sorted(self.path.glob("**/zero_pp_rank_*_optim_states.pt"))


@dataclass(frozen=True)
class RunFolder:
    """Every path of one run, under ``root`` (``logging.output_dir``)."""

    root: Path
    """The run folder."""

    @property
    def metrics(self) -> Path:
        """Every step's metrics, one JSON line each (``train.metrics_log``)."""
        return self.root / "metrics.jsonl"

    @property
    def samples(self) -> Path:
        """Sample rollouts, one JSON line each."""
        return self.root / "samples.jsonl"

    @property
    def report_md(self) -> Path:
        """The held-out evaluations side by side (``train.report_md``)."""
        return self.root / "report.md"

    @property
    def report_png(self) -> Path:
        """The run's main curves (``train.report_png``)."""
        return self.root / "report.png"

    @property
    def warm_start(self) -> Path:
        """The warm-started model and tokenizer (``train.warm_start``)."""
        return self.root / "warm_start"

    @property
    def warm_start_done(self) -> Path:
        """The warm start's statistics, written last into ``warm_start``: it is complete when this exists."""
        return self.warm_start / "warm_start.json"

    @property
    def checkpoints(self) -> Path:
        """The checkpoints and their ``latest`` pointer (``train.checkpoint``)."""
        return self.root / "checkpoints"

    @property
    def latest(self) -> Path:
        """The pointer file naming the newest complete checkpoint."""
        return self.checkpoints / "latest"

    def checkpoint(self, step: int) -> CheckpointFolder:
        """The checkpoint after step ``step``: ``checkpoints/step_000010``."""
        return CheckpointFolder(self.checkpoints / f"step_{step:06d}")

    def checkpoint_staging(self, step: int) -> CheckpointFolder:
        """Where the checkpoint of ``step`` is written before it is renamed into place:
        ``step_000010.tmp``."""
        return CheckpointFolder(self.checkpoints / f"{self.checkpoint(step).path.name}.tmp")

    def checkpoint_step(self, folder: Path) -> int | None:
        """The step of a checkpoint folder's name (``step_000010``: 10); None for any other name."""
        match = _CHECKPOINT.match(folder.name)
        return int(match.group(1)) if match else None

    def evaluation(self, point: EvalPoint, held_out_set: str = "") -> EvalFolder:
        """The folder of the evaluation at ``point`` on the held-out set (``""``) or a further one."""
        return EvalFolder(self.root / point.folder_name(held_out_set))

    def probe(self, held_out_set: str = "") -> Path:
        """The rubric probe's trivial policies on a held-out set: ``probe.json``, ``probe_<set>.json``."""
        return self.root / f"probe{_suffix(held_out_set)}.json"


@dataclass
class HeldOutSet:
    """Everything a run measured on one held-out set."""

    evaluations: dict[EvalPoint, Evaluation] = field(default_factory=dict)
    """The model's evaluations on the set, in the order they ran."""
    probe: list[PolicyScore] | None = None
    """The rubric probe's trivial policies on the set; None when none was probed."""


@dataclass
class HeldOutResults:
    """A run's held-out results for its reports, by set: ``""`` is the held-out set, any other name a further
    one."""

    sets: dict[str, HeldOutSet] = field(default_factory=dict)
    """Each set's results."""

    def record(self, point: EvalPoint, held_out_set: str, evaluation: Evaluation) -> None:
        """Keep the evaluation at ``point`` (one of ``REPORTED``) on a set; one made again, after a resume,
        replaces the earlier one.

        Raises:
            ValueError: ``point`` is not one a run keeps."""
        if point not in REPORTED:
            raise ValueError(f"{point.folder_name()}: a run keeps only {[p.folder_name() for p in REPORTED]}")
        self.sets.setdefault(held_out_set, HeldOutSet()).evaluations[point] = evaluation

    def record_probe(self, held_out_set: str, rows: list[PolicyScore]) -> None:
        """Keep the trivial policies probed on a set."""
        self.sets.setdefault(held_out_set, HeldOutSet()).probe = rows

    def evaluation(self, point: EvalPoint, held_out_set: str = "") -> Evaluation | None:
        """The evaluation at ``point`` on a set, or None if there was none."""
        found = self.sets.get(held_out_set)
        return found.evaluations.get(point) if found is not None else None

    def probe(self, held_out_set: str = "") -> list[PolicyScore] | None:
        """The trivial policies probed on a set, or None if none was."""
        found = self.sets.get(held_out_set)
        return found.probe if found is not None else None


def read_held_out(run: RunFolder) -> HeldOutResults:
    """The held-out results of a run as its files hold them: the folder of each evaluation in ``REPORTED``
    that has a ``summary.json``, and every probe file, as the trainer kept them in memory (further sets in the
    order of their names).

    Raises:
        ValueError: naming the file that does not read, and why."""
    results = HeldOutResults()
    found = []
    for folder in run.root.glob("eval_*"):
        match = _EVAL_FOLDER.match(folder.name)
        if match is None or not EvalFolder(folder).summary.is_file():
            continue
        point = _REPORTED_BY_KIND[match.group(1)]
        found.append((match.group(2) or "", REPORTED.index(point), point))
    for name, _, point in sorted(found, key=lambda f: (f[0] != "", f[0], f[1])):  # the held-out set first
        results.record(point, name, read_evaluation(run.evaluation(point, name)))
    for path in sorted(run.root.glob("probe*.json")):
        match = _PROBE_FILE.match(path.name)
        if match is None:
            continue
        try:
            rows = [PolicyScore.from_dict(r) for r in json.loads(path.read_text(encoding="utf-8"))]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: does not read as the probe's rows: {exc!r}") from None
        results.record_probe(match.group(1) or "", rows)
    return results


def write_probe(run: RunFolder, held_out_set: str, rows: Sequence[PolicyScore]) -> None:
    """The rubric probe's trivial policies on a held-out set, for the user (``read_held_out`` reads them)."""
    run.probe(held_out_set).write_text(json.dumps([r.as_dict() for r in rows], indent=2), encoding="utf-8")
