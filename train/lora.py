"""LoRA through peft (``model.lora``): the adapter, its KL reference and its checkpoints.

- ``adapt`` wraps the loaded model in a peft ``PeftModel``: every base weight frozen, one adapter on each
  targeted linear layer (default: every ``nn.Linear`` but the output head, ``linear_layer_names``), and only
  the adapter's parameters trainable, so only they are in the optimiser.
- ``AdapterOff`` is the KL reference of a LoRA run: the same module, called with its adapter disabled
  (peft's ``disable_adapter``), so the base model's logprobs come without a second copy of the weights.
- ``save_adapter_checkpoints`` makes ``accelerator.save_state`` write the adapter (``adapter/``, peft's own
  format) instead of the whole model, and ``load_state`` read it back; the optimiser, schedule and RNG
  states are accelerate's as for full weights, so a resume is exact. Under DeepSpeed the engine saves and
  loads the training state itself: ``engine_checkpoint_kwargs`` keeps the frozen base weights out of its
  files, and ``adapter/`` is still written (gathered from the shards under ZeRO-3) for people to use.

The merged weights (``W + B @ A * alpha / r``) that the local backend samples from and the final ``model/``
holds are computed in ``envs.models.adapters``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from train.config import LoraConfig
from train.run_folder import CheckpointFolder

if TYPE_CHECKING:  # accelerate and torch load only where a function uses them
    import torch
    from accelerate import Accelerator
    from peft import PeftModel
    from transformers import PreTrainedModel


def linear_layer_names(model: PreTrainedModel) -> list[str]:
    """The distinct last names of ``model``'s ``nn.Linear`` modules, the output head left out (for Qwen2:
    ``down_proj gate_proj k_proj o_proj q_proj up_proj v_proj``)."""
    import torch

    head = model.get_output_embeddings()  # type: ignore[no-untyped-call]  # unannotated in transformers
    return sorted(
        {
            name.rsplit(".", 1)[-1]
            for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear) and module is not head
        }
    )


def adapt(model: PreTrainedModel, lora: LoraConfig) -> PeftModel:
    """``model`` wrapped in a peft model with a fresh LoRA adapter of ``lora``; only the adapter trains.

    Raises:
        ValueError: naming ``model.lora.target_modules`` when a name is not a linear layer of the model."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    linear = linear_layer_names(model)
    targets = lora.target_modules or linear
    if unknown := sorted(set(targets) - set(linear)):
        raise ValueError(
            f"model.lora.target_modules: {unknown} are not linear layers of the model (the output head is "
            f"never adapted); its linear layers are {linear}"
        )
    peft_config = PeftLoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,  # type: ignore[arg-type]  # annotated int; peft only divides it by r
        lora_dropout=lora.dropout,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, peft_config)


class AdapterOff:
    """The policy with its adapter switched off: the base model, for the KL term of a LoRA run.

    Called as a model (``forward_logprobs`` does); the call runs the policy's unwrapped module in eval mode
    (as a separately loaded reference would be) inside peft's ``disable_adapter``, and restores the mode."""

    def __init__(self, module: PeftModel) -> None:
        self.module = module
        """The unwrapped peft policy (its forward, not DDP's: the reference needs no gradient sync)."""

    def __call__(self, **inputs: Any) -> Any:
        training = self.module.training
        self.module.eval()
        try:
            with self.module.disable_adapter():
                return self.module(**inputs)
        finally:
            self.module.train(training)


def save_adapter_checkpoints(accelerator: Accelerator) -> None:
    """Have ``accelerator.save_state`` write each adapted model's adapter to ``<checkpoint>/adapter/`` instead
    of its full weights, and ``load_state`` load it back (accelerate's save and load hooks). Under DeepSpeed
    the engine saves and loads the training state (``engine_checkpoint_kwargs``); ``adapter/`` is written
    all the same, its weights gathered on every process first under ZeRO-3 (collective)."""
    from envs.models.adapters import is_adapted

    def save(models: list[torch.nn.Module], weights: list[dict[str, torch.Tensor]], output_dir: str) -> None:
        engine_saves = len(weights) != len(models)  # DeepSpeed: the engine saves, weights is empty
        for i in reversed(range(len(models))):
            module = accelerator.unwrap_model(models[i])
            if is_adapted(module):
                with gathered(accelerator, [p for p in module.parameters() if p.requires_grad]):
                    if accelerator.is_main_process:
                        module.save_pretrained(
                            str(CheckpointFolder(Path(output_dir)).adapter), safe_serialization=True
                        )
                if not engine_saves:
                    weights.pop(i)  # only the adapter is saved: the base weights are the model folder's

    def load(models: list[torch.nn.Module], input_dir: str) -> None:  # DeepSpeed's are not in ``models``
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        for i in reversed(range(len(models))):
            module = accelerator.unwrap_model(models[i])
            if is_adapted(module):
                saved = load_file(str(CheckpointFolder(Path(input_dir)).adapter_weights))
                result = set_peft_model_state_dict(module, saved)
                if unexpected := getattr(result, "unexpected_keys", None):
                    raise KeyError(
                        f"{input_dir}: the saved adapter has weights the model lacks: {unexpected[:5]}"
                    )
                models.pop(i)

    accelerator.register_save_state_pre_hook(save)
    accelerator.register_load_state_pre_hook(load)


def engine_checkpoint_kwargs(accelerator: Accelerator) -> tuple[dict[str, Any], dict[str, Any]]:
    """Keyword arguments for ``accelerator.save_state`` and ``load_state``: under DeepSpeed, with an adapted
    model, the engine's files leave the frozen base weights out (``exclude_frozen_parameters``; they are the
    model folder's) and loading accepts their absence (``load_module_strict=False``). Empty otherwise."""
    from envs.models.adapters import is_adapted
    from train.distributed import is_deepspeed

    if not is_deepspeed(accelerator) or not any(
        is_adapted(accelerator.unwrap_model(m)) for m in accelerator._models
    ):
        return {}, {}
    return {"exclude_frozen_parameters": True}, {"load_module_strict": False}


@contextmanager
def gathered(accelerator: Accelerator, params: list[torch.nn.Parameter]) -> Iterator[None]:
    """Inside, ``params`` are whole on every process: under ZeRO-3 DeepSpeed gathers them from the shards
    (collective: every process must enter) and partitions them again on exit, read-only. Elsewhere a no-op."""
    from train.distributed import is_deepspeed

    if not is_deepspeed(accelerator) or accelerator.state.deepspeed_plugin.zero_stage != 3:
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
        yield
