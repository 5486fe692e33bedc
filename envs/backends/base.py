"""The inference protocol every backend speaks: token ids in, token ids and logprobs out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class SamplingParams:
    """How to sample completions for one prompt."""

    n: int = 1
    """Completions per prompt (a GRPO group)."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    max_tokens: int = 256
    """Most tokens per completion."""
    min_tokens: int = 0
    """Fewest tokens per completion (end-of-sequence is suppressed until then; benchmarks use it)."""
    stop_token_ids: tuple[int, ...] = ()
    """Token ids that end a completion (in addition to the model's end-of-sequence tokens)."""
    seed: int | None = None
    """Seed for reproducible sampling."""

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"SamplingParams.n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must lie in (0, 1], got {self.top_p}")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"SamplingParams.min_tokens must lie in [0, max_tokens], got {self.min_tokens}")
        if self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens must be >= 1, got {self.max_tokens}")


@dataclass
class Sample:
    """One completion, exactly as the engine produced it."""

    completion_ids: list[int]
    """Sampled token ids (the stop token included when generation stopped on one)."""
    logprobs: list[float]
    """Log-probability of each sampled token under the engine (log-softmax of logits / temperature)."""
    text: str
    """The completion decoded (for judges and logs only; never re-tokenised for training)."""
    finish_reason: str
    """``stop`` (a stop token) or ``length`` (``max_tokens`` reached)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Engine extras (e.g. the server that answered, weight version)."""


class BackendError(RuntimeError):
    """The inference engine failed (a server gone, a timeout after retries); the message says which."""


@runtime_checkable
class InferenceBackend(Protocol):
    """Anything that samples completions for token-id prompts."""

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Sample]:
        """``params.n`` samples for one prompt."""
        ...

    async def close(self) -> None:
        """Release connections, threads and models."""
        ...
