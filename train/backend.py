"""The rollout backend of a run, and the trainer's side of weight sync.

``rollout_backend`` builds a run's backend with ``envs.build.make_backend``, the one backend factory, and
the options its kind gives (``train.backend_kinds``, the one place that reads ``rollout.backend``). The
trainer sees only the ``envs.backends.base.TrainingBackend`` protocol (generation, the thread and lock its
torch work shares, ``sync_weights``, ``check_sync``, ``close``).
``PolicyWeights`` is the policy as a backend sees it when the weights change: the unwrapped module, the full
state dict gathered from the shards, the main process.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from envs.backends.base import TrainingBackend
from envs.build import make_backend
from train.backend_kinds import backend_kind
from train.config import TrainConfig

if TYPE_CHECKING:  # accelerate, torch and transformers load only where the trainer uses them
    import torch
    from accelerate import Accelerator
    from transformers import PreTrainedTokenizerBase


class PolicyWeights:
    """The policy being trained, wrapped by ``accelerate`` (possibly sharded by DeepSpeed ZeRO-3)."""

    def __init__(self, accelerator: Accelerator, model: torch.nn.Module) -> None:
        self.accelerator = accelerator
        """The run's ``Accelerator``."""
        self.model = model
        """The prepared (wrapped) model."""

    @property
    def module(self) -> torch.nn.Module:
        """The unwrapped policy."""
        module: torch.nn.Module = self.accelerator.unwrap_model(self.model)
        return module

    @property
    def is_main(self) -> bool:
        """Whether this is the main process (the one that talks to inference servers)."""
        return bool(self.accelerator.is_main_process)

    def full_state_dict(self) -> Mapping[str, torch.Tensor]:
        """Every weight on the main process, whatever the sharding (collective under ZeRO-3); empty on the
        other processes under ZeRO-3."""
        state_dict = self.accelerator.get_state_dict(self.model)
        return state_dict if state_dict is not None else {}

    def barrier(self) -> None:
        """Wait for every process."""
        self.accelerator.wait_for_everyone()


def rollout_backend(
    cfg: TrainConfig,
    policy: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    model_dir: Path,
    adapter_prefix: str | None = None,
    executor: concurrent.futures.Executor | None = None,
) -> TrainingBackend:
    """The backend ``cfg.rollout`` names, built by ``envs.build.make_backend`` around ``policy`` (the
    unwrapped module) and its tokenizer with the options its kind gives (``train.backend_kinds``);
    ``adapter_prefix`` names a LoRA run's adapters on vLLM servers; ``executor``: the run's torch thread,
    where a local backend samples and a colocated engine runs."""
    from train.memory_check import make_setup
    from train.memory_plan import read_shapes

    kind = backend_kind(cfg.rollout)
    try:
        shapes = read_shapes(Path(model_dir) / "config.json")
    except ValueError:
        shapes = None  # an architecture the plan cannot read: a kind that needs it says so
    backend, _ = make_backend(
        kind.name,
        model_dir,
        policy=policy,
        tokenizer=tokenizer,
        adapter_prefix=adapter_prefix,
        executor=executor,
        **kind.build_options(cfg, shapes, make_setup(cfg)),
    )
    return backend


def adapter_prefix(output_dir: str | Path) -> str:
    """The names of a LoRA run's adapters on vLLM servers start with ``policy-`` and 8 hex digits of its
    output folder: the same in every process of the run (those that do not push name what the main one
    loaded), and apart from another run's on a shared server."""
    import hashlib

    folder = str(Path(output_dir).resolve())
    return f"policy-{hashlib.sha256(folder.encode()).hexdigest()[:8]}"
