"""``report.png``: the few curves of a run a researcher reads first (``train.report_md`` writes
``report.md``).

``report.png`` draws these panels from ``metrics.jsonl`` (every other metric is in wandb); a panel with
nothing logged is left out:

============================  =================================================  =========================
panel                         what                                               keys
============================  =================================================  =========================
Held-out evaluation           mean reward with its 95% interval at each          ``eval/reward_mean`` (step
                              evaluation; the rubric probe's trivial policies    0 and every
                              as horizontal lines                                ``logging.eval_every``),
                                                                                 ``eval_warm_start/...``,
                                                                                 ``eval_final/...``
Training reward (mean ± std)  the rollouts' reward, a band of one std            ``reward/mean``,
                                                                                 ``reward/std``
Requirement pass rates        per requirement, over the step's rollouts          ``req/...``
KL and clipping               KL (left axis), clip fractions (right axis)        ``train/kl/...``,
                                                                                 ``train/clip/...``
Lengths (tokens)              completion tokens per rollout                      ``length/..._tokens_...``
Time split (s per step)       waiting for rollouts, the update, the weight sync  ``time/{wait,train,sync}_s``
Memory (GiB)                  host and GPU memory, peak and current             ``memory/...``
============================  =================================================  =========================

The interval of a held-out evaluation is the logged ``reward_ci95``, clustered by scenario
(``rubrics.intervals``) as everywhere a reward carries a ±.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rubrics.multistep.probe import PolicyScore
from train.run_folder import AFTER, BEFORE, WARM_START, RunFolder

_EVALUATIONS = {  # prefix of a held-out evaluation's metrics -> its curve (after training joins the others)
    BEFORE.prefix(): "held-out",
    WARM_START.prefix(): "after the warm start",
    AFTER.prefix(): "held-out",
}
HELD_OUT = "Held-out evaluation"
_REWARD = "Training reward (mean ± std)"
_PANELS: tuple[tuple[str, str], ...] = (  # (title, pattern of its keys), in reading order
    (HELD_OUT, "^(" + "|".join(map(re.escape, _EVALUATIONS)) + ")reward_mean$"),
    (_REWARD, r"^reward/mean$"),
    ("Requirement pass rates", r"^req/"),
    ("Mean |advantage| per requirement node (credit per reply)", r"^credit/.*/advantage_abs$"),
    ("KL and clipping", r"(^|/)kl/|(^|/)clip/.*frac"),
    ("Lengths (tokens)", r"^length/.*tokens"),
    ("Time split (s per step)", r"^time/(wait|train|sync)_s$"),
    ("Memory (GiB)", r"^memory/"),
)
_RIGHT_AXIS = re.compile(r"(^|/)clip/")  # fractions, drawn beside the KL on their own scale
_MAX_LEGEND = 12


@dataclass
class Series:
    """One curve of a panel."""

    label: str
    """The legend's entry (the metric's key, or an evaluation's name)."""
    steps: list[int] = field(default_factory=list)
    """Steps where it was logged with a number (0: before training)."""
    values: list[float] = field(default_factory=list)
    """Its value at each step."""
    errors: list[float] | None = None
    """Half-widths of the 95% intervals (error bars), or None."""
    band: list[float] | None = None
    """Half-widths of a shaded band (the training reward's std), or None."""
    right: bool = False
    """Drawn on the panel's right-hand axis (another scale)."""


@dataclass
class Panel:
    """One panel of ``report.png``: its curves and horizontal reference lines."""

    series: list[Series] = field(default_factory=list)
    """The curves."""
    lines: dict[str, float] = field(default_factory=dict)
    """Horizontal lines: the rubric probe's trivial policies (name -> mean reward), on the held-out panel."""


def read_metrics(metrics_jsonl: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl``, one per step, sorted by step.

    A step can have several lines: the training metrics of step k and the held-out evaluation logged after
    it (``eval/`` or ``eval_final/``), or the evaluations before training (step 0). Lines whose metrics are
    disjoint are merged into one row. A line that logs a metric the step's row already has replaces the row:
    the step was logged again after a resume, and the last line wins."""
    by_step: dict[int, dict[str, Any]] = {}
    for line in Path(metrics_jsonl).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        step = int(row["step"])
        earlier = by_step.get(step, {})
        if (set(earlier) & set(row)) - _NOT_METRICS:
            earlier = {}
        by_step[step] = {**earlier, **row}
    return [by_step[step] for step in sorted(by_step)]


_NOT_METRICS = {"step", "wall_time"}


def panel_keys(keys: list[str]) -> dict[str, list[str]]:
    """The keys each panel of ``report.png`` draws (see the module docstring), in reading order; a panel with
    no key is left out, and so is every key no panel draws."""
    panels = {title: [k for k in sorted(keys) if re.search(pattern, k)] for title, pattern in _PANELS}
    return {title: panel for title, panel in panels.items() if panel}


def figure_data(rows: list[dict[str, Any]], probe: Sequence[PolicyScore] = ()) -> dict[str, Panel]:
    """What ``report.png`` draws from the rows of ``read_metrics``: each panel's curves, in reading order;
    ``probe``, the rubric probe's trivial policies on the held-out set, as lines on the held-out panel."""
    keys = sorted({key for row in rows for key in row})
    panels: dict[str, Panel] = {}
    for title, panel in panel_keys(keys).items():
        if title == HELD_OUT:
            panels[title] = _held_out(rows, probe)
        elif title == _REWARD:
            mean = _series(rows, "reward/mean")
            std = dict(zip(*_numbers(rows, "reward/std"), strict=True))
            mean.band = [std.get(step, math.nan) for step in mean.steps]
            panels[title] = Panel([mean])
        else:
            curves = [_series(rows, key) for key in panel]
            for curve in curves:
                curve.right = bool(_RIGHT_AXIS.search(curve.label)) and len(curves) > 1
            panels[title] = Panel(curves)
    return panels


def write_report_png(run: RunFolder, probe: Sequence[PolicyScore] = ()) -> Path:
    """Plot the run's main curves from its ``metrics.jsonl`` (every step it logged, those of an earlier
    process of a resumed run included), with ``probe``'s trivial policies on the held-out panel, into its
    ``report.png``; returns the PNG's path."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    rows = read_metrics(run.metrics)
    panels = figure_data(rows, probe)
    cols = min(3, max(1, len(panels)))
    nrows = max(1, math.ceil(len(panels) / cols))
    fig = Figure(figsize=(5.2 * cols, 3.4 * nrows), layout="constrained")
    axes = fig.subplots(nrows, cols, squeeze=False).ravel()
    steps = max((int(row["step"]) for row in rows), default=0)  # step 0 is the evaluation before training
    for ax, (title, panel) in zip(axes, panels.items(), strict=False):
        _draw(ax, panel)
        ax.set_title(title, fontsize="medium")
        ax.set_xlim(-0.05 * max(steps, 1), steps + 0.05 * max(steps, 1))  # one step axis for every panel
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    if not panels:
        axes[0].text(0.5, 0.5, "no metrics logged", ha="center", va="center")
    fig.suptitle(f"{run.root.name}: {steps} steps")
    run.root.mkdir(parents=True, exist_ok=True)
    fig.savefig(run.report_png, dpi=100)
    return run.report_png


def _draw(ax: Any, panel: Panel) -> None:
    """One panel: its curves (maybe some on a right-hand axis), error bars, bands and horizontal lines."""
    right = ax.twinx() if any(curve.right for curve in panel.series) else None
    if right is not None:
        right.set_ylabel("fraction (right axis)", fontsize="x-small")
    for i, curve in enumerate(panel.series):
        axis = right if curve.right and right is not None else ax
        color = f"C{i % 10}"
        marker = "o" if len(curve.steps) < 30 else None
        if curve.errors is not None:
            axis.errorbar(curve.steps, curve.values, yerr=curve.errors, label=curve.label, color=color,
                          marker=marker, capsize=3)  # fmt: skip
        else:
            axis.plot(curve.steps, curve.values, label=curve.label, color=color, marker=marker)
        if curve.band is not None:
            low = [v - b for v, b in zip(curve.values, curve.band, strict=True)]
            high = [v + b for v, b in zip(curve.values, curve.band, strict=True)]
            axis.fill_between(curve.steps, low, high, color=color, alpha=0.2, label="± std")
    for j, (name, value) in enumerate(panel.lines.items()):
        ax.axhline(value, color="0.5", linestyle=(0, (1 + j, 2)), linewidth=1, label=name)
    handles = [
        h for a in (ax, right) if a is not None for h in zip(*a.get_legend_handles_labels(), strict=True)
    ]
    if 0 < len(handles) <= _MAX_LEGEND:
        ax.legend(*zip(*handles, strict=True), fontsize="x-small")
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)


def _numbers(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of ``key`` where it was logged with a number (a NaN is logged as null)."""
    pairs = [(int(row["step"]), float(row[key])) for row in rows if isinstance(row.get(key), int | float)]
    return [s for s, _ in pairs], [v for _, v in pairs]


def _series(rows: list[dict[str, Any]], key: str) -> Series:
    steps, values = _numbers(rows, key)
    return Series(key, steps, values)


def _held_out(rows: list[dict[str, Any]], probe: Sequence[PolicyScore]) -> Panel:
    """The held-out panel: the model's mean reward with its interval at each evaluation (``eval/`` at step 0
    and every ``eval_every`` steps joined with ``eval_final/``; the warm start's apart) and the trivial
    policies' lines."""
    points: dict[str, list[tuple[int, float, float]]] = {"held-out": [], "after the warm start": []}
    for row in rows:
        for prefix, label in _EVALUATIONS.items():
            mean = row.get(f"{prefix}reward_mean")
            if not isinstance(mean, int | float):
                continue
            ci = row.get(f"{prefix}reward_ci95")
            ci = float(ci) if isinstance(ci, int | float) else math.nan  # a 0.0 interval stays 0.0
            points[label].append((int(row["step"]), float(mean), ci))
    panel = Panel(
        [
            Series(label, [p[0] for p in curve], [p[1] for p in curve], errors=[p[2] for p in curve])
            for label, curve in points.items()
            if curve
        ]
    )
    panel.lines = {row.policy: row.reward_mean for row in probe}
    return panel
