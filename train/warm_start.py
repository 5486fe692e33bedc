"""The supervised warm start: the policy imitates demonstration conversations before GRPO.

GRPO learns only from groups whose rewards differ. A base model that never earns a reward on a task (the
135M main-job model on first_responder: 0 of 384 rollouts passed the first requirement) gives every
group zero variance, and GRPO never updates. The warm start is the usual way out (DeepSeek-R1's "cold
start"): a few epochs of next-token cross-entropy on demonstrations, the loss on the assistant turns only,
then GRPO from there.

A demonstration is one conversation of a training scenario as the environment would hold it: the dispatch,
then the assistant's replies and the revealed texts in turn (``scripts/compose_scenarios.py`` writes the
ideal ones of first_responder). The environment's system prompt is put in front, and the tokens are the chat
template's, exactly as a rollout sees them. A demonstration of a held-out scenario is refused: imitating it
would leak the evaluation.

The weights after the warm start are saved in ``<output_dir>/warm_start/`` (with ``warm_start.json``: the
loss per epoch, the tokens, the seconds) and are the reference model of GRPO's KL term; a run that finds
that folder complete loads it instead of imitating again. Under DeepSpeed the warm start is refused (its
optimiser is the engine's): run it without DeepSpeed and start the DeepSpeed run from that folder.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rubrics.types import TokenSequence
from train.config import TrainConfig, WarmStartConfig
from train.demonstrations import check_not_held_out, load_demonstrations
from train.lora import AdapterOff
from train.run_folder import RunFolder

if TYPE_CHECKING:  # accelerate, torch and transformers load only where a function uses them
    import torch
    from accelerate import Accelerator
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from envs.environment import Environment
    from train.policy import Policy


def encode(
    tokenizer: PreTrainedTokenizerBase, system_prompt: str | None, messages: Sequence[dict[str, str]]
) -> TokenSequence:
    """A demonstration as token ids under the chat template (``ids``) with ``loss_mask`` 1 on the tokens of
    each assistant turn (its end-of-turn token included, as the model must learn to stop) and 0 elsewhere."""
    from envs.chat import TemplatePrefixError, assistant_turns

    ids: list[int] = []
    mask: list[int] = []
    for prompt, turn in assistant_turns(tokenizer, system_prompt, messages):
        if prompt[: len(ids)] != ids:
            raise TemplatePrefixError(
                "the chat template does not extend the earlier turns verbatim; "
                "cannot mask the assistant turns"
            )
        mask += [0] * (len(prompt) - len(ids)) + [1] * len(turn)
        ids = prompt + turn
    return TokenSequence(ids, mask, [0.0] * len(ids))


def is_complete(run: RunFolder) -> bool:
    """Whether ``run`` holds a finished warm start."""
    return run.warm_start_done.is_file()


def imitate(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    sequences: Sequence[TokenSequence],
    cfg: WarmStartConfig,
    accelerator: Accelerator,
    seed: int,
    log: Callable[[int, dict[str, float]], None],
    logits_chunk_tokens: int = 0,
) -> dict[str, Any]:
    """``cfg.epochs`` passes of AdamW over ``sequences`` (``encode``'s), ``cfg.batch_size`` per optimiser
    step in micro-batches of ``cfg.micro_batch_size``; the loss is the mean cross-entropy over the step's
    assistant tokens, the output head run as the GRPO steps run it (``optim.logits_chunk_tokens``).
    ``model`` is the prepared policy (under DDP its forward averages the gradients).
    ``log(step, metrics)`` gets each step's loss. Returns the statistics (``epoch_loss``: the mean of the
    steps' losses in each epoch)."""
    import torch

    from train.distributed import is_deepspeed
    from train.policy import adamw

    if is_deepspeed(accelerator):
        raise RuntimeError(
            "warm_start under DeepSpeed: run the warm start without DeepSpeed first, then set "
            f"model.name_or_path to its {RunFolder(Path('<output_dir>')).warm_start} folder and "
            "warm_start.demonstrations to null"
        )
    rank, world = accelerator.process_index, accelerator.num_processes
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = adamw(params, cfg.learning_rate, (0.9, 0.99), 0.0)
    pad = tokenizer.pad_token_id or 0
    order, rng = list(range(len(sequences))), random.Random(seed)
    step, started, epoch_losses = 0, time.perf_counter(), []
    model.train()  # gradient checkpointing (model.gradient_checkpointing) acts only in training mode
    for _ in range(cfg.epochs):
        rng.shuffle(order)
        mine = order[rank::world]  # each process its share; DDP averages the gradients
        total, batches = 0.0, 0
        for start in range(0, len(mine), cfg.batch_size):
            # micro-batches of similar lengths: less padding, the same step
            rows = sorted(
                (sequences[i] for i in mine[start : start + cfg.batch_size]), key=lambda r: len(r.ids)
            )
            loss_sum = _accumulate(model, rows, cfg.micro_batch_size, accelerator, pad, logits_chunk_tokens)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, 1.0))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            total += loss_sum
            batches += 1
            log(step, {"warm_start/loss": loss_sum, "warm_start/grad_norm": grad_norm})
        epoch_losses.append(total / max(batches, 1))
    return _statistics(sequences, cfg.epochs, step, epoch_losses, time.perf_counter() - started)


def _statistics(
    sequences: Sequence[TokenSequence],
    epochs: int,
    steps: int,
    epoch_losses: list[float],
    seconds: float,
) -> dict[str, Any]:
    """What ``imitate`` returns and ``warm_start.json`` keeps: the demonstrations, their tokens (all, and
    the assistant tokens trained on), the epochs and optimiser steps, the loss per epoch, the seconds and
    the perplexity of the last epoch."""
    return {
        "demonstrations": len(sequences),
        "epochs": epochs,
        "steps": steps,
        "epoch_loss": epoch_losses,
        "tokens": sum(len(s.ids) for s in sequences),
        "trained_tokens": sum(sum(s.loss_mask) for s in sequences),
        "seconds": seconds,
        "final_perplexity": math.exp(epoch_losses[-1]) if epoch_losses else math.nan,
    }


def _accumulate(
    model: torch.nn.Module,
    rows: list[TokenSequence],
    micro_batch_size: int,
    accelerator: Accelerator,
    pad: int,
    chunk: int,
) -> float:
    """The gradients of one optimiser step over ``rows``, in micro-batches: the mean cross-entropy over all
    their assistant tokens (each micro-batch's sum divided by the step's token count). Returns the loss."""
    from train.batching import collate
    from train.distributed import backward
    from train.forward import forward_logprobs

    tokens = sum(sum(r.loss_mask) for r in rows)
    loss_sum = 0.0
    for m in range(0, len(rows), micro_batch_size):
        part = rows[m : m + micro_batch_size]
        batch = collate(part, [0.0] * len(part), [False] * len(part), pad).to(accelerator.device)
        logprobs_BT, _ = forward_logprobs(model, batch, 1.0, entropy=False, chunk_tokens=chunk)  # [B, T]
        loss = -(logprobs_BT * batch.loss_mask_BT).sum() / tokens
        backward(accelerator, loss, m + micro_batch_size >= len(rows))
        loss_sum += float(loss.detach())
    return loss_sum


def save(
    run: RunFolder, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, stats: dict[str, Any]
) -> None:
    """The warm-started model and tokenizer into ``run``'s ``warm_start/``, then ``warm_start.json`` with
    ``stats`` (last: it marks completion)."""
    run.warm_start.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(run.warm_start, safe_serialization=True)
    tokenizer.save_pretrained(run.warm_start)
    run.warm_start_done.write_text(json.dumps(stats, indent=2), encoding="utf-8")


def load_into(module: torch.nn.Module, folder: Path) -> None:
    """Copy the warm-started weights of ``folder`` into ``module`` (the policy or the reference model)."""
    import torch

    from envs.models.loading import load_causal_lm

    saved = load_causal_lm(folder, dtype=next(module.parameters()).dtype)
    with torch.no_grad():
        module.load_state_dict(saved.state_dict())


def run_warm_start(
    cfg: TrainConfig,
    run: RunFolder,
    policy: Policy,
    env: Environment,
    held_out: list[str],
    start_step: int,
) -> None:
    """The trainer's warm start of ``policy`` (``train.policy.Policy``): imitate the demonstrations, save the
    result, and make it the KL reference. A finished one in the run folder is loaded instead of run again;
    a resumed run (``start_step > 0``) has its policy from the checkpoint and takes only the reference from
    it."""
    accelerator = policy.accelerator
    folder = run.warm_start
    unwrapped = accelerator.unwrap_model(policy.model)
    if is_complete(run):
        if start_step == 0:
            load_into(unwrapped, folder)
        print(f"warm start: loaded {folder}", flush=True)
    else:
        if start_step > 0:
            raise FileNotFoundError(
                f"{folder}: no finished warm start to take the KL reference from, but the run resumes at "
                f"step {start_step}; remove the checkpoints to start over"
            )
        path = cfg.warm_start.demonstrations
        assert path is not None
        demos = load_demonstrations(path)
        check_not_held_out(demos, held_out, path)
        sequences = [encode(policy.tokenizer, env.system_prompt, d.messages) for d in demos]
        verbose = cfg.logging.progress and accelerator.is_main_process

        def log(step: int, metrics: dict[str, float]) -> None:
            if verbose:
                print(f"warm start step {step}  loss {metrics['warm_start/loss']:.3f}", flush=True)

        stats = imitate(
            policy.model,
            policy.tokenizer,
            sequences,
            cfg.warm_start,
            accelerator,
            cfg.seed,
            log,
            logits_chunk_tokens=cfg.optim.logits_chunk_tokens,
        )
        if accelerator.is_main_process:
            save(run, unwrapped, policy.tokenizer, stats)
            print(f"warm start: {json.dumps(stats)}", flush=True)
        accelerator.wait_for_everyone()
    reference = policy.ref_model
    if reference is not None:
        assert not isinstance(reference, AdapterOff)  # the config refuses a warm start under LoRA
        reference.load_state_dict(unwrapped.state_dict())
