"""GRPO on a rubric, top to bottom: sample, score, group advantages, loss, step, sync, log, checkpoint.

Departures from textbook GRPO (each a config switch):
- loss normalisation ``dapo`` by default (token-level over the whole step; ``grpo``, ``dr_grpo``, ``bnpo``
  available) and asymmetric clipping (``epsilon``, ``epsilon_high``);
- no KL term by default (``beta=0``; with ``beta > 0`` a frozen reference model and the k3 estimator; under
  ``model.lora`` the reference is the policy with its adapter off);
- truncated importance-sampling correction against the inference engine's logprobs, on by default;
- one policy update per batch (old logprobs are the current policy's), optionally generated up to
  ``max_off_policy_steps`` batches ahead of the trainer;
- advantages divided by the group's std as in the paper, or by the step's, or not at all
  (``advantage.scale_rewards``); groups with zero reward variance are counted and dropped; errored
  rollouts are left out of their group's baseline and of the loss;
- multi-turn rollouts: environment tokens are attended to but never trained on; with ``advantage.credit``
  ``turn`` or ``mixed`` each reply gets an advantage of its own (``rubrics.advantages``), not the episode's;
- completions cut by the token limit can be left out of the loss (``loss.mask_truncated_completions``);
- an optional supervised warm start on demonstrations before the first rollout (``warm_start``);
- guided groups (``rollout.guide``): each group also replays its example's demonstration as one more rollout,
  so a step the policy never samples right still has a rollout that passed it (``docs/training.md``).

The trainer never names a backend: ``train.backend.rollout_backend`` builds one from the config, and the
``TrainingBackend`` protocol gives the lock and the weight sync. Every torch operation of the run goes to one
thread (``train.threads.TorchWorker``), which a local backend is handed to sample on. The
threads themselves (the event loop, the torch worker, the prefetch of steps ahead) are ``train.threads``.
"""

from __future__ import annotations

import concurrent.futures
import copy
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envs.backends.base import TrainingBackend
from envs.environment import Environment
from envs.evaluation import evaluate_to_dir
from envs.models.loading import check_versions
from envs.rollout import ScoredRollout
from train.backend import PolicyWeights, adapter_prefix, rollout_backend
from train.backend_kinds import backend_kind
from train.checkpoint import TrainerState, check_resumable, load_latest, save_checkpoint
from train.config import TRAIN_SET, LoggingConfig, RolloutConfig, TrainConfig
from train.distributed import (
    is_deepspeed,
    make_accelerator,
    memory_gib,
    trim_host_memory,
    tune_host_allocator,
)
from train.memory_check import check_at_start
from train.metrics_log import RunLogger, progress_printer
from train.orchestrator import Orchestrator, StepRollouts
from train.policy import Policy, load_policy
from train.report_md import write_report_md
from train.report_png import write_report_png
from train.rollout_metrics import depth_advantage_metrics, error_causes, rollout_metrics, sample_rows
from train.run_folder import (
    AFTER,
    BEFORE,
    REPORTED,
    WARM_START,
    EvalPoint,
    HeldOutResults,
    RunFolder,
    after_step,
    read_held_out,
    write_probe,
)
from train.task import build_task, extra_eval_examples, training_sample
from train.threads import EventLoopThread, Prefetch, TorchWorker, timed
from train.warm_start import run_warm_start

if TYPE_CHECKING:  # imported inside the functions that use them (see the note below)
    from transformers import PreTrainedTokenizerBase


# torch, transformers and accelerate (and train.step, which imports torch) are imported inside the
# functions that use them: after check_versions(), so that a too-old transformers stops with its message,
# and so that importing this module stays light.


# over 60 lines on purpose: the whole run reads top to bottom in its numbered sections; each is a few calls
def train(cfg: TrainConfig) -> dict[str, Any]:
    """Run GRPO as configured; returns the run folder and the evaluation summaries before and after."""
    check_versions()  # before anything heavy: a too-old transformers would fail every rollout
    from accelerate.utils import set_seed  # imports torch (see the note above)

    # -- 1. processes, policy, optimiser ------------------------------------------------------------
    accelerator = make_accelerator(cfg)  # one process, DDP or DeepSpeed; CPU or GPU
    if accelerator.device.type == "cpu":  # before the rollout worker and the OpenMP teams start
        tune_host_allocator(cfg)
    check_at_start(cfg, accelerator)  # the memory plan, printed; a run that cannot fit stops before loading
    if cfg.optim.share_prefix and is_deepspeed(accelerator):
        raise ValueError(
            "optim.share_prefix: not under DeepSpeed (the shared prompt pass and the replies' pass are two "
            "forwards for one backward, which its engine is not tested with); set optim.share_prefix: false"
        )
    set_seed(cfg.seed, deterministic=cfg.deterministic)
    run = RunFolder(Path(cfg.logging.output_dir))
    processes, per_process = accelerator.num_processes, cfg.rollout.prompts_per_step
    if cfg.resume:  # a checkpoint this launch cannot continue stops the run before any model loads
        check_resumable(run, processes, per_process, is_deepspeed(accelerator))
    backend_kind(cfg.rollout).check_before_load(cfg)  # a second now, not after the load
    # every torch operation of the run on one thread: a second thread's OpenMP team would slow both (threads)
    worker = TorchWorker(concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="torch"))
    policy = worker.run(load_policy, cfg, accelerator)
    weights = PolicyWeights(accelerator, policy.model)

    # -- 2. backend, environment, data ------------------------------------------------------------------
    prefix = adapter_prefix(run.root)
    backend = rollout_backend(
        cfg, weights.module, policy.tokenizer, policy.model_dir, prefix, worker.executor
    )
    process = (accelerator.process_index, processes)  # each step's examples are shared out between them
    env, train_examples, eval_examples = build_task(cfg, policy.tokenizer)
    held_names = [e.name for e in eval_examples]
    if not accelerator.is_main_process:
        eval_examples = []  # evaluation (and its files) belong to the main process

    # -- 3. resume --------------------------------------------------------------------------------------
    saved = (worker.run(load_latest, accelerator, run) if cfg.resume else None) or TrainerState(0)
    start_step = saved.step
    cursor = saved.cursor
    orchestrator = Orchestrator.from_config(cfg, env, backend, train_examples, cfg.seed, cursor, process)
    main = accelerator.is_main_process
    logger = RunLogger(cfg.logging, run, cfg.model_dump(), resume_run_id=saved.wandb_run_id, enabled=main)
    loop = EventLoopThread()
    if start_step > 0:  # the backend generates with the resumed weights
        loop.run(_sync(cfg.rollout, backend, weights, policy.tokenizer, start_step))

    # -- 4. evaluate before training ----------------------------------------------------------------------
    eval_env = _at_temperature(env, cfg.logging.eval_temperature)

    extra_sets = extra_eval_examples(cfg, env, train_examples) if eval_examples else {}
    if accelerator.is_main_process:  # the fixed sample of training scenarios (logging.train_eval_sample)
        extra_sets[TRAIN_SET] = training_sample(cfg, env, train_examples)
    # every set evaluated at each point: the held-out set (""), the further ones, the training sample
    eval_sets = {name: examples for name, examples in {"": eval_examples, **extra_sets}.items() if examples}
    # what an earlier process of a resumed run evaluated is in the folder; the rest is kept as it is made
    held_out = read_held_out(run) if start_step > 0 and eval_sets else HeldOutResults()

    def evaluate(point: EvalPoint, step: int) -> dict[str, Any] | None:
        """Every set of ``eval_sets`` evaluated at ``point`` (written to the point's folders, logged under its
        prefixes at ``step``, kept for the reports if they read it); returns the held-out set's summary (None
        for a run with only the training sample)."""
        n, seed = cfg.logging.eval_group_size, cfg.seed + 424_242  # the same sampling noise every time
        summaries = {}
        for name, examples in eval_sets.items():
            out = run.evaluation(point, name)
            result = loop.run(evaluate_to_dir(eval_env, backend, examples, n, out, seed=seed))
            if point in REPORTED:
                held_out.record(point, name, result)
            summaries[name] = result.as_dict()
            logger.log(step, _numbers(summaries[name], point.prefix(name)))
        return summaries.get("")

    before = evaluate(BEFORE, 0) if start_step == 0 and eval_sets else None
    if start_step == 0:  # the trivial policies the environment knows on each evaluated set, for the report
        for name, examples in eval_sets.items():
            rows = loop.run(env.probe(train_examples, examples))
            if rows:
                held_out.record_probe(name, rows)
                write_probe(run, name, rows)

    # -- 5. the supervised warm start (``warm_start.demonstrations``), and the held-out model after it -------
    if cfg.warm_start.demonstrations:
        worker.run(run_warm_start, cfg, run, policy, env, held_names, start_step)
        loop.run(_sync(cfg.rollout, backend, weights, policy.tokenizer, start_step))
        if start_step == 0 and eval_sets:
            evaluate(WARM_START, 0)

    # -- 6. the loop: rollouts (maybe ahead), update, sync, log, checkpoint ---------------------------------
    prefetch = Prefetch(orchestrator, loop, cfg.rollout.max_off_policy_steps, cfg.max_steps)
    progress = progress_printer(cfg.logging, cfg.max_steps, accelerator.is_main_process, start_step)
    on_cpu = accelerator.device.type == "cpu"
    trim = on_cpu and cfg.trim_host_memory and not cfg.reuse_freed_host_memory
    for step in range(start_step, cfg.max_steps):
        rollouts, t_wait = timed(prefetch.take, step)
        check_failures(rollouts.all_rollouts, step, cfg.rollout.max_errored_fraction)
        backend.release()  # a colocated engine gives its device memory back while the policy trains
        batch_stats, t_train = timed(worker.run, policy.learn, rollouts, backend, step)
        # the pages freed between live blocks go back to the OS (TrainConfig.trim_host_memory), so the step's
        # memory/rss_gib is what it holds, not what it freed
        t_trim = timed(worker.run, trim_host_memory)[1] if trim else 0.0
        synced, t_sync = timed(loop.run, _sync(cfg.rollout, backend, weights, policy.tokenizer, step + 1))
        seconds = {"wait": t_wait, "train": t_train, "trim": t_trim, "sync": t_sync}
        metrics = {
            **step_metrics(rollouts, step, cfg.rollout, batch_stats, seconds),
            **synced,
            **env.step_metrics(rollouts.all_rollouts),
            **rollouts.shares,
        }
        _log_and_save(cfg, run, logger, policy, rollouts, step, metrics, worker)
        progress(step + 1, metrics)
        # the held-out curve of a long run
        if _evaluate_now(cfg.logging, cfg.max_steps, step + 1) and eval_sets:
            evaluate(after_step(step + 1), step + 1)
            if trim:
                worker.run(trim_host_memory)

    # -- 7. evaluate after, report ----------------------------------------------------------------------
    after = evaluate(AFTER, cfg.max_steps) if eval_sets else None
    loop.run(backend.close())
    loop.close()
    worker.close()
    logger.finish()
    if accelerator.is_main_process:
        _write_reports(run, held_out, bool(eval_sets), env, cfg.advantage.describe())
    return {"run_dir": str(run.root), "before": before, "after": after}


async def _sync(
    rollout: RolloutConfig,
    backend: TrainingBackend,
    weights: PolicyWeights,
    tokenizer: PreTrainedTokenizerBase,
    step: int,
) -> dict[str, float]:
    """Give the backend the policy's weights of ``step``, then check them when ``rollout.check_sync``; returns
    what the backend says the sync sent (``sync/bytes``, ...; nothing from a backend that sends nothing)."""
    await backend.sync_weights(weights, step)
    if rollout.check_sync:
        await backend.check_sync(weights, tokenizer)
    return dict(backend.sync_stats)


class TooManyFailedRollouts(RuntimeError):
    """More of a step's rollouts failed than ``rollout.max_errored_fraction`` allows."""


def check_failures(rollouts: Sequence[ScoredRollout], step: int, max_fraction: float) -> None:
    """Raise ``TooManyFailedRollouts`` naming the causes when more than ``max_fraction`` of ``rollouts``
    failed."""
    causes = error_causes(rollouts)
    failed = sum(causes.values())
    if failed <= max_fraction * len(rollouts):
        return
    counts = ", ".join(f"{cause}: {n}" for cause, n in causes.most_common())
    first = next(r.error for r in rollouts if r.error)
    raise TooManyFailedRollouts(
        f"step {step + 1}: {failed} of {len(rollouts)} rollouts failed ({counts}), more than "
        f"rollout.max_errored_fraction = {max_fraction}; the first: {first}"
    )


def step_metrics(
    rollouts: StepRollouts,
    step: int,
    rollout: RolloutConfig,
    batch_stats: dict[str, float],
    seconds: dict[str, float],
) -> dict[str, float]:
    """Everything logged for one step: rollouts, groups, the update's statistics, the time split, the peak
    memory so far and the memory held now."""
    metrics = rollout_metrics(rollouts.all_rollouts, rollouts.kept_advantages)
    metrics.update(depth_advantage_metrics([g.rollouts for g in rollouts.kept_groups]))
    guides = [r for g in rollouts.groups for r in g.guides if r.healthy]
    if guides:  # guided groups (rollout.guide): what the replayed demonstrations earned and trained with
        metrics["guide/reward_mean"] = sum(r.reward for r in guides) / len(guides)
        metrics["guide/advantage_mean"] = sum(r.advantage for r in guides) / len(guides)
    metrics["groups/zero_variance_fraction"] = rollouts.zero_variance_groups / rollout.prompts_per_step
    metrics["groups/dropped"] = float(rollouts.dropped_groups)
    metrics["off_policy_steps"], metrics["off_policy_steps_mean"] = rollouts.off_policy_steps(step)
    tokens = metrics["length/completion_tokens_mean"] * metrics["rollouts"]
    metrics.update({f"train/{k}": v for k, v in batch_stats.items()})
    metrics.update({f"decode/{k}": v for k, v in rollouts.decode.items()})
    metrics.update(
        {
            "time/generate_and_score_s": rollouts.generate_s,
            "time/wait_s": seconds["wait"],
            "time/train_s": seconds["train"],
            "time/trim_s": seconds["trim"],
            "time/sync_s": seconds["sync"],
            "tokens_per_s/generate": tokens / max(rollouts.generate_s, 1e-9),
            **memory_gib(),
        }
    )
    return metrics


def _log_and_save(
    cfg: TrainConfig,
    run: RunFolder,
    logger: RunLogger,
    policy: Policy,
    rollouts: StepRollouts,
    step: int,
    metrics: dict[str, float],
    worker: TorchWorker,
) -> None:
    """Log the step, sample rollouts now and then, and checkpoint (the last one also holds a plain model)."""
    done = step + 1
    logger.log(done, metrics)
    if done % cfg.logging.sample_every == 0:
        logger.log_samples(done, sample_rows(rollouts.all_rollouts))
    last = done == cfg.max_steps
    if done % cfg.logging.checkpoint_every == 0 or last:
        examples = cfg.rollout.prompts_per_step * policy.accelerator.num_processes
        state = TrainerState(done, rollouts.cursor, logger.run_id, examples_per_step=examples)
        model = policy.model if last else None
        worker.run(save_checkpoint, policy.accelerator, run, state, model=model, tokenizer=policy.tokenizer)


def _at_temperature(env: Environment, temperature: float | None) -> Environment:
    """``env`` itself, or a shallow copy that samples at ``temperature`` (the training rollouts, which may be
    in flight during an evaluation, keep theirs)."""
    if temperature is None:
        return env
    evaluation = copy.copy(env)
    evaluation.sampling = replace(env.sampling, temperature=temperature)
    return evaluation


def _evaluate_now(logging: LoggingConfig, max_steps: int, done: int) -> bool:
    """Whether ``logging.eval_every`` asks for a held-out evaluation after step ``done`` (the last step is
    evaluated anyway, as ``eval_final/``)."""
    every = logging.eval_every
    return every > 0 and done % every == 0 and done < max_steps


def _numbers(summary: dict[str, Any], prefix: str) -> dict[str, float]:
    """The numeric entries of an evaluation summary, as metrics under ``prefix``."""
    return {f"{prefix}{k}": v for k, v in summary.items() if isinstance(v, int | float)}


def _write_reports(
    run: RunFolder, held_out: HeldOutResults, evaluated_after: bool, env: Environment, estimator: str
) -> None:
    """``report.png`` from the metrics, and ``report.md`` (with the environment's own sections, and the
    advantage ``estimator`` named) when both evaluations exist."""
    write_report_png(run, held_out.probe() or ())
    if evaluated_after and held_out.evaluation(BEFORE) is not None:
        report = write_report_md(run, held_out, sections=env.report_sections, estimator=estimator)
        print(f"report: {report}", flush=True)
