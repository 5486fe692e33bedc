"""Run an evaluation: ``n`` rollouts of every example through an environment and a backend, scored, written
to JSONL as they finish; ``evaluate_to_dir`` adds the plot and ``summary.json`` and returns the result typed
(the trainer's held-out evaluations use it)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path

from envs.backends.base import InferenceBackend
from envs.environment import Environment
from envs.evaluation.result import EvalFolder, Evaluation
from envs.evaluation.summary import EvalSummary, plot_summary, summarize
from envs.examples import Example
from envs.rollout import ScoredRollout, rewards_and_errors, scored_groups
from rubrics.advantages import episode_credit


async def run_eval(
    env: Environment,
    backend: InferenceBackend,
    examples: Sequence[Example],
    n: int,
    out_path: str | Path | None = None,
    concurrency: int = 4,
    progress: bool = True,
) -> tuple[EvalSummary, list[ScoredRollout]]:
    """``n`` rollouts of every example, scored, with their advantages within each group (unscaled), typed
    once each group finishes (``scored_groups``); each group is written to ``out_path`` then."""
    from rich.progress import Progress

    out = Path(out_path) if out_path else None
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
    handle = out.open("w", encoding="utf-8") if out is not None else None
    semaphore = asyncio.Semaphore(concurrency)
    rollouts: list[ScoredRollout] = []
    start = time.perf_counter()
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("rollouts", total=len(examples) * n)

        async def one(example: Example) -> None:
            async with semaphore:
                group = await env.run_group(example, backend, n)
            (scored_group,) = scored_groups([group], episode_credit(*rewards_and_errors([group])))
            scored = scored_group.rollouts
            rollouts.extend(scored)
            if handle is not None:
                for r in scored:
                    handle.write(json.dumps(r.to_dict(), default=str) + "\n")
                handle.flush()
            bar.advance(task, len(group))

        try:
            await asyncio.gather(*(one(e) for e in examples))
        finally:
            if handle is not None:
                handle.close()
    return summarize(rollouts, time.perf_counter() - start, len(examples)), rollouts


async def evaluate_to_dir(
    env: Environment,
    backend: InferenceBackend,
    examples: Sequence[Example],
    n: int,
    folder: EvalFolder,
    seed: int,
) -> Evaluation:
    """A held-out evaluation, written to ``folder`` for the user (``rollouts.jsonl``, ``eval.png``,
    ``summary.json``) and returned. Sampling is seeded from ``seed`` alone, so the evaluations before and
    after training draw the same noise."""
    import torch

    torch.manual_seed(seed)
    # every group at once: the backend batches all the evaluation's rollouts, as it does a training step's
    summary, rollouts = await run_eval(
        env, backend, examples, n, folder.rollouts, concurrency=max(len(examples), 1), progress=False
    )
    plot_summary(summary, rollouts, folder.plot)
    result = Evaluation(summary, env.summary_metrics(rollouts), rollouts)
    folder.summary.write_text(json.dumps(result.as_dict(), indent=2, default=str))
    return result
