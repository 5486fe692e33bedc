"""GRPO on a rubric, top to bottom: sample, score, group advantages, loss, step, sync, log, checkpoint.

Departures from textbook GRPO (each a config switch):
- loss normalisation ``dapo`` by default (token-level over the whole step; ``grpo``, ``dr_grpo``, ``bnpo``
  available) and asymmetric clipping (``epsilon``, ``epsilon_high``);
- no KL term by default (``beta=0``; with ``beta > 0`` a frozen reference model and the k3 estimator);
- truncated importance-sampling correction against the inference engine's logprobs, on by default;
- one policy update per batch (old logprobs are the current policy's), optionally generated up to
  ``max_off_policy_steps`` batches ahead of the trainer;
- groups with zero reward variance are counted and dropped; errored rollouts are left out of their group's
  baseline and of the loss;
- multi-turn rollouts: environment tokens are attended to but never trained on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import threading
import time
from pathlib import Path
from typing import Any

from train.config import TrainConfig


class _Loop:
    """An event loop in a background thread: generation, judging and evaluation run there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rollouts", daemon=True)
        self.thread.start()

    def submit(self, coro: Any) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Run GRPO as configured; returns the final evaluation summary and the run folder."""
    import torch
    from accelerate.utils import set_seed
    from transformers import AutoModelForCausalLM, AutoTokenizer, get_scheduler

    from envs.backends.local import LocalBackend
    from envs.models import resolve_model
    from train.batching import states_to_batch
    from train.checkpoint import load_latest, save_checkpoint
    from train.distributed import make_accelerator, zero_stage
    from train.metrics_log import RunLogger
    from train.report import write_report, write_summary
    from train.rollout_metrics import rollout_metrics, sample_rows
    from train.setup import build_env, evaluate, sync_weights
    from train.step import train_step

    # -- 1. processes, model, optimiser -------------------------------------------------------------
    accelerator = make_accelerator(cfg)  # one process, DDP or DeepSpeed; CPU or GPU
    if cfg.rollout.backend == "local" and zero_stage(accelerator) == 3:
        raise ValueError(
            "rollout.backend: 'local' cannot generate under DeepSpeed ZeRO-3 (each process holds a shard of "
            "the weights); use backend 'vllm', or ZeRO-2"
        )
    set_seed(cfg.seed, deterministic=cfg.deterministic)
    run_dir = Path(cfg.logging.output_dir)
    model_dir = resolve_model(cfg.model.name_or_path)
    dtype = getattr(torch, cfg.model.dtype)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=dtype, attn_implementation=cfg.model.attn_implementation
    )
    if cfg.model.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    ref_model = None
    if cfg.loss.beta > 0:
        ref_model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval().requires_grad_(False)
        ref_model = ref_model.to(accelerator.device)
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=cfg.optim.learning_rate,
        betas=cfg.optim.adam_betas,
        weight_decay=cfg.optim.weight_decay,
    )
    scheduler = get_scheduler(cfg.optim.schedule, optimizer, cfg.optim.warmup_steps, cfg.max_steps)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    policy = accelerator.unwrap_model(model)

    # -- 2. environment, backend, orchestrator -----------------------------------------------------
    sampler = _sampling_copy(cfg, accelerator, policy)  # None: sample from the policy itself
    if cfg.rollout.backend == "local":
        backend: Any = LocalBackend(
            sampler or policy, tokenizer, max_batch_rows=cfg.rollout.prompts_per_step * cfg.rollout.group_size
        )
    else:
        from envs.backends.vllm import VllmBackend

        backend = VllmBackend(cfg.rollout.vllm_urls, str(model_dir))
    # torch work shares the local backend's one thread (see envs.backends.local: two OpenMP teams on one
    # CPU slow every kernel down); the local backend then generates and trains in turn, never at once
    executor = getattr(backend, "executor", None)

    def compute(fn: Any, *args: Any) -> Any:
        return executor.submit(fn, *args).result() if executor is not None else fn(*args)

    env, train_examples, eval_examples = build_env(
        cfg, tokenizer, rank=accelerator.process_index, world=accelerator.num_processes
    )
    if not accelerator.is_main_process:
        eval_examples = []  # evaluation (and its files) belong to the main process

    # -- 3. resume ----------------------------------------------------------------------------------
    state = load_latest(accelerator, run_dir) if cfg.resume else None
    start_step = int(state["step"]) if state else 0
    from train.orchestrator import Orchestrator

    orchestrator = Orchestrator(
        env,
        backend,
        train_examples,
        cfg.rollout.prompts_per_step,
        cfg.rollout.group_size,
        cfg.advantage,
        seed=cfg.seed + 7919 * accelerator.process_index,
        cursor=(state or {}).get("cursor"),
    )
    logger = RunLogger(
        cfg.logging,
        cfg.model_dump(),
        resume_run_id=(state or {}).get("wandb_run_id"),
        enabled=accelerator.is_main_process,
    )
    loop = _Loop()
    if start_step > 0 and cfg.rollout.backend == "vllm":
        loop.submit(sync_weights(cfg, accelerator, model, tokenizer, backend, start_step)).result()
    if sampler is not None:
        compute(_copy_weights, policy, sampler)

    # -- 4. evaluate before training ------------------------------------------------------------------
    before = None
    if start_step == 0 and eval_examples:
        before = loop.submit(evaluate(cfg, env, backend, eval_examples, run_dir / "eval_before")).result()
        logger.log(0, {f"eval/{k}": v for k, v in before.items() if isinstance(v, int | float)})

    # -- 5. the loop ---------------------------------------------------------------------------------
    pending: dict[int, concurrent.futures.Future[Any]] = {}
    cursors: dict[int, dict[str, int]] = {}

    def request(step: int, version: int) -> None:
        """Start generating ``step``'s rollouts with the weights of ``version`` optimiser steps."""
        if step < cfg.max_steps and step not in pending:
            pending[step] = loop.submit(orchestrator.produce(step, policy_version=version))
            cursors[step] = orchestrator.cursor.state()  # the cursor once step's examples are taken

    def learn(rollouts: Any) -> dict[str, float]:
        """The policy update on one step's scored groups."""
        batch = states_to_batch(
            rollouts.groups,
            rollouts.advantages,
            tokenizer.pad_token_id or 0,
            cfg.loss.mask_truncated_completions,
        )
        # generation may run ahead: the weights never change under it (train_step holds the lock to step)
        lock = getattr(backend, "lock", None)
        return train_step(model, ref_model, batch, cfg, accelerator, optimizer, scheduler, lock)

    progress = _progress(cfg, accelerator, start_step)
    for step in range(start_step, cfg.max_steps):
        for ahead in range(cfg.rollout.max_off_policy_steps + 1):
            request(step + ahead, version=step)
        t0 = time.perf_counter()
        rollouts = pending.pop(step).result()
        t_generate = time.perf_counter() - t0

        advantages = [a for group in rollouts.advantages for a in group]
        metrics = rollout_metrics(rollouts.all_states, advantages)
        metrics["groups/zero_variance_fraction"] = (
            rollouts.zero_variance_groups / cfg.rollout.prompts_per_step
        )
        metrics["groups/dropped"] = float(rollouts.dropped_groups)
        metrics["off_policy_steps"] = float(step - rollouts.policy_version)

        t0 = time.perf_counter()
        batch_stats = compute(learn, rollouts)
        t_train = time.perf_counter() - t0

        t0 = time.perf_counter()
        if cfg.rollout.backend == "vllm":
            loop.submit(sync_weights(cfg, accelerator, model, tokenizer, backend, step + 1)).result()
        elif sampler is not None:
            with backend.lock:
                compute(_copy_weights, policy, sampler)
        t_sync = time.perf_counter() - t0

        tokens = metrics["length/completion_tokens_mean"] * metrics["rollouts"]
        metrics.update({f"train/{k}": v for k, v in batch_stats.items()})
        metrics.update(
            {
                "time/generate_and_score_s": rollouts.generate_s,
                "time/wait_s": t_generate,
                "time/train_s": t_train,
                "time/sync_s": t_sync,
                "tokens_per_s/generate": tokens / max(rollouts.generate_s, 1e-9),
            }
        )
        logger.log(step + 1, metrics)
        if (step + 1) % cfg.logging.sample_every == 0:
            logger.log_samples(step + 1, sample_rows(rollouts.all_states))
        last = step + 1 == cfg.max_steps
        if (step + 1) % cfg.logging.checkpoint_every == 0 or last:  # the last one also holds a plain model/
            extra = {"cursor": cursors.pop(step), "wandb_run_id": logger.run_id}
            save_checkpoint(
                accelerator, run_dir, step + 1, extra, model=model if last else None, tokenizer=tokenizer
            )
        else:
            cursors.pop(step)
        progress(step + 1, metrics)

    # -- 6. evaluate after, report ----------------------------------------------------------------------
    after = None
    if eval_examples and (start_step < cfg.max_steps or before is None):
        after = loop.submit(evaluate(cfg, env, backend, eval_examples, run_dir / "eval_after")).result()
        logger.log(
            cfg.max_steps, {f"eval_final/{k}": v for k, v in after.items() if isinstance(v, int | float)}
        )
    loop.close()
    logger.finish()
    if accelerator.is_main_process:
        write_report(run_dir / "metrics.jsonl", run_dir / "report.png")
        if after is not None and (run_dir / "eval_before" / "summary.json").is_file():
            print(f"report: {write_summary(run_dir)}", flush=True)
    return {"run_dir": str(run_dir), "before": before, "after": after}


def _sampling_copy(cfg: TrainConfig, accelerator: Any, policy: Any) -> Any:
    """The local backend's copy of the policy in ``rollout.inference_dtype``, or None to share the policy."""
    import copy

    import torch

    if cfg.rollout.backend != "local" or cfg.rollout.inference_dtype in (None, cfg.model.dtype):
        return None
    sampler = copy.deepcopy(policy).to(getattr(torch, cfg.rollout.inference_dtype))
    for wrapper in ("forward", "_original_forward"):  # accelerate's autocast wrapper: the copy runs plain
        sampler.__dict__.pop(wrapper, None)
    return sampler.eval().requires_grad_(False)


def _copy_weights(policy: Any, sampler: Any) -> None:
    """Refresh the sampling copy from the policy (same architecture: parameters pair up in order)."""
    import torch

    with torch.no_grad():
        for target, source in zip(sampler.parameters(), policy.parameters(), strict=True):
            target.copy_(source)


def _progress(cfg: TrainConfig, accelerator: Any, start: int) -> Any:
    """A live one-line progress report on the main process."""
    show = cfg.logging.progress and accelerator.is_main_process
    started = time.perf_counter()

    def report(step: int, metrics: dict[str, float]) -> None:
        if not show:
            return
        done = step - start
        eta = (time.perf_counter() - started) / max(done, 1) * (cfg.max_steps - step)
        reward = metrics.get("reward/mean", math.nan)
        print(
            f"step {step}/{cfg.max_steps}  reward {reward:.3f}  loss {metrics.get('train/loss', math.nan):+.4f}  "
            f"zero-var {metrics['groups/zero_variance_fraction']:.2f}  "
            f"distinct {metrics.get('diversity/distinct_fraction', math.nan):.2f}  eta {eta / 60:.1f} min",
            flush=True,
        )

    return report
