"""Helpers of the trainer tests: a run config on the tiny model, and a run's metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from train.config import TrainConfig
from train.config_files import load_config

ROOT = Path(__file__).resolve().parents[2]

SMALL_RUN = (
    "rollout.prompts_per_step=2",
    "rollout.group_size=2",
    "rollout.max_tokens=8",
    "optim.micro_batch_size=2",
    "logging.eval_group_size=1",
    "logging.progress=false",
    "rollout.guide=false",
    "logging.train_eval_sample=0",
)
"""The overrides of a small trainer run: two prompts a step, two rollouts each of at most 8 tokens, one
micro-batch a step, one rollout per held-out scenario, no progress bar, no guided groups (the main job's
demonstrations are of its own scenarios; ``test_a_guided_run_trains_on_the_replayed_demonstrations`` runs
them) and no training sample evaluated. A test that needs one of them
otherwise overrides it after these."""


def run_config(config: str, model_dir: Path, run_dir: Path, *overrides: str) -> TrainConfig:
    """``configs/train/<config>`` with the tiny model, output to ``run_dir``, then ``overrides``."""
    return load_config(
        ROOT / "configs/train" / config,
        [f"model.name_or_path={model_dir}", f"logging.output_dir={run_dir}", *overrides],
    )


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Every line of the run's ``metrics.jsonl``."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
