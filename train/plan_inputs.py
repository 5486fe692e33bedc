"""What the memory plan reads besides the run config: the architecture's shapes (``ModelShapes``, from
``train.memory_plan.read_shapes``) and where the run runs (``Setup``, from ``train.memory_check.make_setup``).
Their own module, below both the plan and the backend kinds (``train.backend_kinds``), which size their
engines from them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShapes:
    """What the plan needs of an architecture, read from its ``config.json``."""

    parameters: int
    """Distinct parameters (a tied output head counted once)."""
    linear: tuple[tuple[str, int, int], ...]
    """``(last name, in features, out features)`` of every ``nn.Linear`` but the output head."""
    head_parameters: int
    """Parameters of the output head's weight ([V, H]), tied or not."""
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int


@dataclass(frozen=True)
class Setup:
    """Where the run runs: what the run config alone does not say."""

    device: str
    """``cuda``, ``cpu``, or ``stated`` (a size given on the command line)."""
    device_bytes: int | None
    """Memory of the device one process uses (the host's, for CPU processes on one host); None: unknown."""
    processes: int = 1
    """Processes of the launch (ZeRO divides among them)."""
    zero_stage: int = 0
    """DeepSpeed ZeRO stage (0: no DeepSpeed)."""
    mixed_precision: str = "no"
    """``model.mixed_precision`` resolved: ``no``, ``bf16`` or ``fp16``."""
    inference_dtype: str | None = None
    """``rollout.inference_dtype`` resolved (None: the policy itself samples)."""

    @property
    def half_autocast(self) -> bool:
        """Whether the step runs under bf16 or fp16 autocast."""
        return self.mixed_precision in ("bf16", "fp16")
