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
from envs.evaluation.resumable import GroupWriter, Resume, in_example_order, still_to_run
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
    resume: Resume | None = None,
) -> tuple[EvalSummary, list[ScoredRollout]]:
    """``n`` rollouts of every example, scored, with their advantages within each group (unscaled), typed
    once each group finishes (``scored_groups``); each group is written to ``out_path`` then, in one write.

    With ``resume`` (``rubric-grpo eval``), the examples whose groups it holds are not played again, the new
    groups are appended to ``out_path``, and the rollouts returned and summarised are the old and the new in
    the examples' order (so the summary is the same however the run was split); without it, ``out_path`` is
    written afresh and the rollouts come in the order their groups finished."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    done = list(resume.rollouts) if resume is not None else []
    todo = still_to_run(examples, done, n) if resume is not None else list(examples)
    writer = GroupWriter(Path(out_path), append=resume is not None) if out_path else None
    semaphore = asyncio.Semaphore(concurrency)
    rollouts: list[ScoredRollout] = []
    start = time.perf_counter()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, disable=not progress, transient=True) as bar:
        task = bar.add_task("rollouts", total=len(examples) * n, completed=len(done))

        async def one(example: Example) -> None:
            async with semaphore:
                group = await env.run_group(example, backend, n)
            (scored_group,) = scored_groups([group], episode_credit(*rewards_and_errors([group])))
            rollouts.extend(scored_group.rollouts)
            if writer is not None:
                writer.write(scored_group.rollouts)
            bar.advance(task, len(group))

        try:
            await asyncio.gather(*(one(e) for e in todo))
        finally:
            if writer is not None:
                writer.close()
    wall_s = time.perf_counter() - start
    if resume is None:
        return summarize(rollouts, wall_s, len(examples)), rollouts
    every = in_example_order([*done, *rollouts], examples)
    return summarize(every, resume.wall_s + wall_s, len(examples)), every


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
