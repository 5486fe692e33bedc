"""Run logging: every step's metrics to wandb and to ``<output_dir>/metrics.jsonl``; sample rollouts to a
wandb Table and ``<output_dir>/samples.jsonl``; and the live progress line printed after each step.

wandb runs offline unless a key is configured: the mode is ``online`` only when ``logging.wandb_mode`` is
``online`` *and* an API key is available (``WANDB_API_KEY`` or a ``wandb login`` entry in ``~/.netrc``),
and a ``WANDB_MODE`` of ``offline`` or ``disabled`` in the environment always wins. Offline runs are written
under ``<output_dir>/wandb/`` (``wandb sync`` uploads them later). In a distributed run, every process may
construct the logger with ``enabled=accelerator.is_main_process``: the others log nothing.

JSONL lines: ``{"step": 3, "wall_time": 1718000000.1, "<metric>": value, ...}`` (``wall_time`` in Unix
seconds; non-finite values are written as ``null``) and ``{"step": 3, "<column>": value, ...}`` per sample
row. After a resume, steps between the checkpoint and the kill appear twice; readers keep the last line of
a step (``train.report_png.read_metrics`` does).
"""

from __future__ import annotations

import json
import math
import netrc
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from train.config import LoggingConfig
from train.run_folder import RunFolder

_WANDB_HOST = "api.wandb.ai"

WandbMode = Literal["online", "offline", "disabled"]


def wandb_mode(configured: str) -> WandbMode:
    """The wandb mode actually used for a configured ``offline|online|disabled`` (see module docstring)."""
    env = os.environ.get("WANDB_MODE", "").strip().lower()
    if configured == "disabled" or env == "disabled":
        return "disabled"
    if configured == "online" and env != "offline" and _api_key_configured():
        return "online"
    return "offline"


def _api_key_configured() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators(_WANDB_HOST) is not None
    except (OSError, netrc.NetrcParseError):
        return False


class RunLogger:
    """Metrics and samples of one run, to wandb and local JSONL.

    Args:
        cfg: The ``logging`` section of the run config.
        run: The run folder (``logging.output_dir``) the metrics and the wandb files go to.
        config_dict: The whole run config as a plain dict (stored as the wandb run's config).
        resume_run_id: The wandb run id saved in the checkpoint being resumed; the run continues under it.
        enabled: False on non-main processes: no wandb run, no files, every call does nothing.
    """

    def __init__(
        self,
        cfg: LoggingConfig,
        run: RunFolder,
        config_dict: dict[str, Any],
        resume_run_id: str | None = None,
        *,
        enabled: bool = True,
    ) -> None:
        self.folder = run
        self.enabled = enabled
        self.mode: WandbMode = wandb_mode(cfg.wandb_mode) if enabled else "disabled"
        self._resume_run_id = resume_run_id
        self._run: Any = None
        """The wandb run; None when disabled (``wandb`` is then never imported: it need not be installed)."""
        if not enabled:
            return
        self.folder.root.mkdir(parents=True, exist_ok=True)
        if self.mode != "disabled":
            self._run = _wandb_init(cfg, self.folder.root, config_dict, self.mode, resume_run_id)
        self._metrics = open(self.folder.metrics, "a", encoding="utf-8")  # noqa: SIM115
        self._samples = open(self.folder.samples, "a", encoding="utf-8")  # noqa: SIM115

    @property
    def run_id(self) -> str:
        """The wandb run id: save it in checkpoints and pass it back as ``resume_run_id`` ("" if disabled
        and not resumed)."""
        return str(self._run.id) if self._run is not None else (self._resume_run_id or "")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Log one step's metrics (``reward/mean``, ``time/generate_s``, ...; see ``train.report_png``)."""
        if not self.enabled:
            return
        values = {key: _finite_or_none(value) for key, value in metrics.items()}
        line = {"step": step, "wall_time": round(time.time(), 3), **values}
        self._metrics.write(json.dumps(line, allow_nan=False) + "\n")
        self._metrics.flush()
        if self._run is not None:
            self._run.log({k: v for k, v in values.items() if v is not None}, step=step)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        """Log sample rollouts: one dict per rollout (prompt, completion, reward, ...), as a wandb Table."""
        if not rows or not self.enabled:
            return
        for row in rows:
            self._samples.write(json.dumps({"step": step, **row}, default=str) + "\n")
        self._samples.flush()
        if self._run is None:
            return
        import wandb

        keys = list(dict.fromkeys(key for row in rows for key in row if key != "step"))
        data = [[step, *(_cell(row.get(key)) for key in keys)] for row in rows]
        columns: list[str | int] = ["step", *keys]
        self._run.log({"samples": wandb.Table(columns=columns, data=data, allow_mixed_types=True)}, step=step)

    def finish(self) -> None:
        """Close the files and the wandb run."""
        if not self.enabled:
            return
        self._metrics.close()
        self._samples.close()
        if self._run is not None:
            self._run.finish()


def _wandb_init(
    cfg: LoggingConfig,
    output_dir: Path,
    config_dict: dict[str, Any],
    mode: WandbMode,
    resume_run_id: str | None,
) -> Any:
    import wandb

    return wandb.init(
        project=cfg.wandb_project,
        name=cfg.run_name or output_dir.resolve().name,
        dir=str(output_dir),
        config=config_dict,
        mode=mode,
        id=resume_run_id,
        resume="allow" if resume_run_id else None,
        settings=wandb.Settings(console="off", silent=True),
    )


def _finite_or_none(value: Any) -> float | None:
    number = float(value)
    return number if math.isfinite(number) else None


def _cell(value: Any) -> Any:
    """A wandb Table cell: numbers, strings and booleans as they are, anything else as JSON text."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return json.dumps(value, default=str)


def progress_printer(
    logging: LoggingConfig, max_steps: int, is_main: bool, start: int
) -> Callable[[int, dict[str, float]], None]:
    """A live one-line progress report per step on the main process (``logging.progress``), with the time
    left estimated from the steps done since ``start``."""
    show = logging.progress and is_main
    started = time.perf_counter()

    def report(step: int, metrics: dict[str, float]) -> None:
        if not show:
            return
        done = step - start
        eta = (time.perf_counter() - started) / max(done, 1) * (max_steps - step)
        reward = metrics.get("reward/mean", math.nan)
        # a step whose groups all had zero variance makes no update: say so rather than print a NaN loss
        loss = (
            "skipped (no group to learn from)"
            if metrics.get("train/skipped")
            else f"{metrics.get('train/loss', math.nan):+.4f}"
        )
        print(
            f"step {step}/{max_steps}  reward {reward:.3f}  loss {loss}  "
            f"zero-var {metrics['groups/zero_variance_fraction']:.2f}  "
            f"distinct {metrics.get('diversity/distinct_fraction', math.nan):.2f}  eta {eta / 60:.1f} min",
            flush=True,
        )

    return report
