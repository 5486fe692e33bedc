"""Checkpoints that survive SIGKILL: accelerate's full training state plus a small JSON of the trainer's own.

Layout of a run folder (its names: ``train.run_folder``)::

    <run>/checkpoints/
        step_000010/             one complete checkpoint
            model.safetensors    \\
            optimizer.bin         |  ``accelerator.save_state``: every object registered with
            scheduler.bin         |  ``accelerator.prepare`` (DeepSpeed writes its own shards instead),
            random_states_0.pkl  /   and the python / numpy / torch RNG states of each process
            trainer_state.json   step and the trainer's ``extra`` (data cursor, wandb run id, processes,
                                 examples per step); written last
            model/               only in a checkpoint saved with ``model=``: ``save_pretrained`` output
                                 (of a LoRA run: the merged model)
            adapter/             a LoRA run's adapter, in place of model.safetensors (``train.lora``)
        step_000020/
        latest                   text file naming the newest complete checkpoint (``step_000020``)

Atomicity: a checkpoint is written into ``step_000020.tmp/`` and renamed to ``step_000020/`` only once it is
complete; the ``latest`` pointer is replaced (write a temporary file, then ``os.replace``) after the rename,
and old checkpoints are pruned after that. A process killed at any moment therefore leaves ``latest`` naming
a complete checkpoint; a leftover ``*.tmp`` folder is ignored by ``load_latest`` and removed by the next save.

Every process of a distributed run must call ``save_checkpoint`` and ``load_latest`` (DeepSpeed saves and
loads collectively); only the main process renames, writes the pointer and prunes. The run folder must be
on a file system that every process sees. Under ZeRO-3, saving ``model/`` gathers the weights and needs
``stage3_gather_16bit_weights_on_model_save: true`` in the DeepSpeed config. A LoRA run under DeepSpeed
keeps the frozen base weights out of the engine's files (``train.lora.engine_checkpoint_kwargs``) and writes
``adapter/`` beside them.

Another number of processes: a checkpoint of plain DDP (or one process) holds whole weights and optimiser
state, so it resumes on any number of processes. The data cursor is one walk over all the examples
(``train.orchestrator``), the same whatever the processes, but the steps must keep taking as many examples
as the checkpoint's did, shared evenly between the processes: ``check_resumable`` refuses, before any model
loads, a number of processes that cannot, and a checkpoint of DeepSpeed ZeRO (its optimiser state is cut
into one shard per process, and DeepSpeed cannot cut it again) on a number other than its own. A process
the checkpoint holds no RNG state of (more processes than saved it) goes on from its seeded one, and says so.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from train.lora import engine_checkpoint_kwargs
from train.run_folder import CheckpointFolder, RunFolder

if TYPE_CHECKING:  # accelerate, torch and transformers load only where a function uses them
    import torch
    from accelerate import Accelerator
    from transformers import PreTrainedTokenizerBase

FORMAT_VERSION = 1


class ResumeError(ValueError):
    """The latest checkpoint of the run folder cannot go on with this launch (``check_resumable``)."""


@dataclass(frozen=True)
class TrainerState:
    """What a checkpoint holds of the trainer's own, beside accelerate's state: ``trainer_state.json``."""

    step: int
    """Optimiser steps completed."""
    cursor: dict[str, Any] | None = None
    """The data cursor's state (``train.sampling``: epoch, position, order), as JSON; None when not saved."""
    wandb_run_id: str | None = None
    """The wandb run a resumed run continues under; None without one."""
    path: Path | None = field(default=None, compare=False)
    """The checkpoint folder it was read from (``load_latest``); None for one about to be saved."""
    processes: int | None = None
    """The processes of the run that saved it (``save_checkpoint`` fills it in); None: unknown (a
    checkpoint written before it was kept)."""
    examples_per_step: int | None = None
    """Training examples each step took, all processes together (processes x ``rollout.prompts_per_step``):
    what a resumed run's steps must keep taking; None: unknown."""

    def extra(self) -> dict[str, Any]:
        """The file's ``extra`` object (JSON): the cursor, the wandb run id, the processes and the examples
        per step."""
        return {
            "cursor": self.cursor,
            "wandb_run_id": self.wandb_run_id,
            "processes": self.processes,
            "examples_per_step": self.examples_per_step,
        }


def save_checkpoint(
    accelerator: Accelerator,
    run: RunFolder,
    state: TrainerState,
    *,
    keep_last: int = 2,
    model: torch.nn.Module | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
) -> Path:
    """Save the full training state after optimiser step ``state.step``; returns the checkpoint folder.

    Args:
        accelerator: The ``accelerate.Accelerator`` whose prepared model, optimiser and scheduler are saved.
        run: The run folder (``logging.output_dir``); checkpoints go to ``<run>/checkpoints/``.
        state: The trainer's own state that ``load_latest`` returns: the step, the data cursor (JSON: a
            tuple comes back a list), the wandb run id.
        keep_last: Complete checkpoints to keep (older ones are deleted after the new one is in place).
        model: The prepared model, for the final checkpoint: also writes a plain ``model/`` folder
            (``save_pretrained`` of the unwrapped model) that evaluation and serving load directly.
        tokenizer: Saved into ``model/`` beside the weights when given with ``model``.
    """
    if keep_last < 1:
        raise ValueError(f"keep_last must be at least 1, got {keep_last}")
    step = state.step
    state = replace(state, processes=accelerator.num_processes)
    if accelerator.project_configuration.automatic_checkpoint_naming:
        raise ValueError("save_checkpoint names its own folders: turn off automatic_checkpoint_naming")
    state_json = json.dumps(
        {"format": FORMAT_VERSION, "step": step, "saved_at": time.time(), "extra": state.extra()},
        indent=2,
        allow_nan=False,
    )  # fail on a cursor that is not JSON before writing anything
    root = run.checkpoints
    final = run.checkpoint(step).path
    tmp = run.checkpoint_staging(step)
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        for debris in root.glob("*.tmp"):  # left by a save that was killed
            shutil.rmtree(debris, ignore_errors=True)
        tmp.path.mkdir()
    accelerator.wait_for_everyone()

    save_kwargs, _ = engine_checkpoint_kwargs(accelerator)  # a LoRA run's engine leaves the base weights out
    accelerator.save_state(str(tmp.path), **save_kwargs)
    if model is not None:
        _save_plain_model(accelerator, model, tokenizer, tmp.model)
    accelerator.wait_for_everyone()

    if accelerator.is_main_process:
        _write_durably(tmp.trainer_state, state_json)
        _replace_dir(tmp.path, final)
        _write_durably(run.latest, final.name + "\n")
        _prune(run, keep_last)
    accelerator.wait_for_everyone()
    return final


def load_latest(accelerator: Accelerator, run: RunFolder) -> TrainerState | None:
    """Restore the newest complete checkpoint of ``run`` into ``accelerator``; None if there is none.

    Loads model, optimiser, scheduler and RNG states through ``accelerator.load_state`` (call it after
    ``accelerator.prepare``). Returns the ``TrainerState`` that ``save_checkpoint`` was given, with the
    checkpoint folder as its ``path``. A process the checkpoint holds no RNG state of goes on from its
    seeded one (accelerate skips the missing file without a word; this says so).
    """
    path = latest_checkpoint(run)
    if path is None:
        return None
    _, load_kwargs = engine_checkpoint_kwargs(accelerator)
    accelerator.load_state(str(path), **load_kwargs)
    state = read_trainer_state(path)
    rank = accelerator.process_index
    if not CheckpointFolder(path).random_states(rank).is_file():
        saved_by = state.processes or "an unknown number of"
        print(
            f"process {rank}: {path} holds the RNG states of {saved_by} processes, none of this one; "
            "it goes on from its seeded RNG",
            flush=True,
        )
    return state


def read_trainer_state(path: Path) -> TrainerState:
    """The ``TrainerState`` in checkpoint folder ``path``; needs no accelerator. A field the file lacks (it
    was written before the field was kept) is None."""
    saved = json.loads(CheckpointFolder(path).trainer_state.read_text(encoding="utf-8"))
    extra = saved.get("extra") or {}
    return TrainerState(
        int(saved["step"]),
        extra.get("cursor"),
        extra.get("wandb_run_id"),
        path,
        extra.get("processes"),
        extra.get("examples_per_step"),
    )


def check_resumable(run: RunFolder, processes: int, prompts_per_step: int, deepspeed: bool) -> None:
    """Refuse to resume ``run``'s latest checkpoint on ``processes`` processes taking ``prompts_per_step``
    examples each a step, where that cannot continue it; needs no accelerator, so a run stops before any model
    loads. Nothing to check without a checkpoint, or where it does not know (written before it kept them).

    Raises:
        ResumeError: naming the checkpoint: its steps took another number of examples (with the per-process
            count that keeps it, or the process counts that can); or it is DeepSpeed ZeRO's, of another number
            of processes.
    """
    path = latest_checkpoint(run)
    if path is None:
        return
    saved = read_trainer_state(path)
    if saved.examples_per_step is not None and saved.examples_per_step != processes * prompts_per_step:
        raise ResumeError(_other_batch(path, saved.examples_per_step, processes, prompts_per_step))
    shards = CheckpointFolder(path).optimizer_shards()
    saved_by = saved.processes or len(shards)  # a checkpoint without ``processes``: its shards count them
    if deepspeed and shards and saved_by != processes:
        raise ResumeError(
            f"{path}: a DeepSpeed ZeRO checkpoint of {saved_by} processes (one optimiser shard each), and "
            f"this run has {processes}; DeepSpeed cannot share the optimiser state out again. Resume on "
            f"{saved_by} processes (accelerate launch --num_processes {saved_by}), or start a new "
            f"logging.output_dir from the weights alone ({shards[0].parent / 'zero_to_fp32.py'} writes them "
            "as a model for model.name_or_path; the optimiser then starts afresh)"
        )


def _other_batch(path: Path, examples: int, processes: int, per_process: int) -> str:
    """Why the checkpoint at ``path``, whose steps took ``examples`` examples, cannot go on with ``processes``
    processes taking ``per_process`` each, and what would."""
    head = (
        f"{path}: the checkpoint's steps took {examples} training examples each, and this run's take "
        f"{processes * per_process} ({processes} process{'es' if processes > 1 else ''} x "
        f"rollout.prompts_per_step {per_process})"
    )
    if examples % processes == 0:
        fix = f"set rollout.prompts_per_step={examples // processes} to keep {examples}"
    else:
        counts = " or ".join(str(n) for n in range(1, examples + 1) if examples % n == 0)
        fix = (
            f"{examples} examples do not share evenly between {processes} processes: resume on {counts} "
            f"processes, with rollout.prompts_per_step = {examples} / processes"
        )
    return f"{head}; {fix}, or start a new logging.output_dir (or resume: false)"


def latest_checkpoint(run: RunFolder) -> Path | None:
    """The newest complete checkpoint folder of ``run``, or None; needs no accelerator.

    Follows the ``latest`` pointer; if it is missing or names an incomplete folder, falls back to the
    complete checkpoint with the highest step. ``*.tmp`` folders never count.
    """
    if run.latest.is_file():
        named = run.checkpoints / run.latest.read_text(encoding="utf-8").strip()
        if run.checkpoint_step(named) is not None and _is_complete(named):
            return named
    complete = _complete_checkpoints(run)
    return complete[-1] if complete else None


def _complete_checkpoints(run: RunFolder) -> list[Path]:
    """Complete checkpoint folders of ``run``, oldest step first."""
    if not run.checkpoints.is_dir():
        return []
    steps = {p: run.checkpoint_step(p) for p in run.checkpoints.iterdir()}
    found = [p for p, step in steps.items() if step is not None and _is_complete(p)]
    return sorted(found, key=lambda p: steps[p] or 0)


def _is_complete(path: Path) -> bool:
    return CheckpointFolder(path).trainer_state.is_file()


def _save_plain_model(
    accelerator: Accelerator, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase | None, out: Path
) -> None:
    """``save_pretrained`` of the unwrapped model (weights gathered on every process first); of a LoRA model,
    the plain architecture with the adapter merged in (``envs.models.adapters``)."""
    from envs.models.adapters import is_adapted, merged_state_dict
    from train.lora import gathered

    unwrapped = accelerator.unwrap_model(model)
    if is_adapted(unwrapped):  # the adapter alone is the checkpoint's adapter/ (train.lora)
        with gathered(accelerator, list(unwrapped.parameters())):  # collective under ZeRO-3
            if accelerator.is_main_process:
                state_dict = merged_state_dict(unwrapped)
                unwrapped.get_base_model().save_pretrained(
                    str(out), state_dict=state_dict, safe_serialization=True
                )
    else:
        state_dict = accelerator.get_state_dict(model)  # collective under ZeRO-3
        if accelerator.is_main_process:
            unwrapped.save_pretrained(str(out), state_dict=state_dict, safe_serialization=True)
    if accelerator.is_main_process and tokenizer is not None:
        tokenizer.save_pretrained(str(out))


def _write_durably(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a temporary file, fsync, then ``os.replace``."""
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _replace_dir(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst``; an existing ``dst`` (the same step saved again) is moved aside first.

    A kill between the two renames leaves ``latest`` naming a missing folder; ``latest_checkpoint`` then
    falls back to the previous complete checkpoint (there is one unless ``keep_last`` is 1).
    """
    if dst.exists():
        aside = dst.with_name(dst.name + ".old.tmp")
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(dst, aside)
        os.replace(src, dst)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(src, dst)


def _prune(run: RunFolder, keep_last: int) -> None:
    for old in _complete_checkpoints(run)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
