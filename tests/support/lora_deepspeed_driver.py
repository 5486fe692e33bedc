"""One process of a LoRA training run under ``accelerate launch`` with DeepSpeed, without rollouts.

    accelerate launch --config_file configs/accelerate/deepspeed_zero3.yaml \\
        tests/support/lora_deepspeed_driver.py MODEL_DIR OUT {train|resume}

``train`` makes three optimiser steps of the trainer's own ``train_step`` (KL term on, so the reference, the
policy with its adapter off, runs too) on fixed batches, checkpointing after step 2 in ``OUT`` and after step 3,
with the merged ``model/``, in ``OUT/final``. ``resume`` loads the step-2 checkpoint and makes step 3 again. Each phase writes the
adapter's weights after step 3, gathered from the shards, to ``OUT/<phase>_adapter.safetensors``, and the
parameters in the optimiser to ``OUT/<phase>_optimised.json``. The test compares them.

Rollouts are left out because ZeRO-3 has no local backend and this test starts no vLLM server: the config is
loaded for vLLM without LoRA, and LoRA is set on the loaded config.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

from train.config import LoraConfig
from train.config_files import load_config
from train.run_folder import RunFolder

ROOT = Path(__file__).resolve().parents[2]


def batch(rank: int, step: int) -> Any:
    """Four sequences of 16 tokens of this process and step, the last 8 on the loss mask, advantages of both
    signs (``tests/train/test_lora.py`` takes ``batch(0, 0)``)."""
    from train.types import TrainBatch

    ids_BT = torch.randint(0, 100, (4, 16), generator=torch.Generator().manual_seed(100 * step + rank))
    mask_BT = torch.zeros(4, 16)
    mask_BT[:, 8:] = 1.0
    return TrainBatch(
        input_ids_BT=ids_BT,
        attention_mask_BT=torch.ones(4, 16, dtype=torch.long),
        loss_mask_BT=mask_BT,
        inference_logprobs_BT=torch.zeros(4, 16),
        advantages_BT=torch.tensor([[1.0], [-1.0], [0.5], [-0.5]]).expand(4, 16).clone(),
    )


def main(model_dir: str, out: str, phase: str) -> None:
    from safetensors.torch import save_file

    from train.checkpoint import TrainerState, load_latest, save_checkpoint
    from train.distributed import make_accelerator
    from train.lora import AdapterOff, gathered
    from train.policy import load_policy
    from train.step import train_step

    overrides = [f"model.name_or_path={model_dir}", f"logging.output_dir={out}", "loss.beta=0.1"]
    overrides += ["optim.micro_batch_size=2", "rollout.backend=vllm", "rollout.vllm_urls=[http://unused:1]"]
    cfg = load_config(ROOT / "configs/train/tiny_test.yaml", overrides)
    cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"lora": LoraConfig()})})
    accelerator = make_accelerator(cfg)
    zero = accelerator.state.deepspeed_plugin.deepspeed_config["zero_optimization"]
    if zero.get("stage") == 3:  # shard every parameter, as a 7B model's are: by default the tiny one's are
        zero["stage3_param_persistence_threshold"] = 0  # all under the size that ZeRO-3 keeps whole
    policy = load_policy(cfg, accelerator)
    assert isinstance(policy.ref_model, AdapterOff), type(policy.ref_model)
    module = accelerator.unwrap_model(policy.model)
    names = {id(p): n for n, p in module.named_parameters()}
    zero_optimizer = (
        policy.model.optimizer
    )  # the engine's ZeRO optimiser: its groups hold the parameters it steps
    groups = getattr(zero_optimizer, "bit16_groups", None) or zero_optimizer.fp16_groups  # ZeRO-2, ZeRO-3
    optimised = sorted(names[id(p)] for group in groups for p in group)
    first = 1
    if phase == "resume":
        saved = load_latest(accelerator, RunFolder(Path(out)))
        assert saved is not None and saved.step == 2, saved
        first = 3
    rank = accelerator.process_index
    for step in range(first, 4):
        train_step(
            policy.model,
            policy.ref_model,
            batch(rank, step),
            cfg,
            accelerator,
            policy.optimizer,
            policy.scheduler,
        )
        if phase == "train" and step == 2:
            save_checkpoint(accelerator, RunFolder(Path(out)), TrainerState(step))
        if phase == "train" and step == 3:  # the final checkpoint, in a folder of its own
            save_checkpoint(
                accelerator,
                RunFolder(Path(out) / "final"),
                TrainerState(step),
                model=policy.model,
                tokenizer=policy.tokenizer,
            )
    adapter = {n: p for n, p in module.named_parameters() if p.requires_grad}
    with gathered(accelerator, list(adapter.values())):
        if accelerator.is_main_process:
            save_file(
                {n: p.detach().clone() for n, p in adapter.items()}, f"{out}/{phase}_adapter.safetensors"
            )
            Path(f"{out}/{phase}_optimised.json").write_text(json.dumps(optimised))
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main(*sys.argv[1:4])
    # Every output is written and the process group is gone: leave without the interpreter's teardown. Under
    # ZeRO-3 on two CPU processes, a C++ destructor at exit aborted one process in about one run of four
    # ("terminate called without an active exception", after the last file was written; with vLLM, its
    # OpenMP, DeepSpeed's shared-memory op and transformers 5.25 each ruled out); 8 runs of 8 pass with this.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
