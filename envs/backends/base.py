"""The protocols every backend speaks.

``InferenceBackend``: token ids in, token ids and logprobs out (what environments and evaluations need).
``TrainingBackend``: an ``InferenceBackend`` that a trainer drives: where torch work sharing the model must
run (``executor``), the lock held while weights change (``lock``), ``sync_weights`` after each optimiser step
and ``check_sync``. The trainer sees only this protocol; each backend owns its differences (the local
backend copies into its sampling copy or does nothing, the vLLM backend pushes to its servers).
``WeightSource`` is the trainer's policy as a backend sees it when the weights change.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from envs.backends.decode import DecodeStats


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


@runtime_checkable
class WeightSource(Protocol):
    """The trainer's policy, as a backend sees it when the weights change (possibly sharded)."""

    @property
    def module(self) -> Any:
        """The unwrapped policy module (its parameters; forward passes are collective under sharding)."""
        ...

    @property
    def is_main(self) -> bool:
        """Whether this process is the one that talks to inference servers."""
        ...

    def full_state_dict(self) -> Mapping[str, Any]:
        """The whole state dict on the main process (collective: every process calls it)."""
        ...

    def barrier(self) -> None:
        """Wait until every process arrives here."""
        ...


@runtime_checkable
class TrainingBackend(InferenceBackend, Protocol):
    """An ``InferenceBackend`` a trainer drives: concurrency and weight sync included."""

    @property
    def executor(self) -> concurrent.futures.Executor | None:
        """The thread that torch work sharing the model must run on (None: any thread)."""
        ...

    @property
    def lock(self) -> contextlib.AbstractContextManager[Any]:
        """Held while generating; the trainer holds it while the weights change under generation."""
        ...

    @property
    def weight_version(self) -> int:
        """The optimiser step whose weights generation uses now; each sample carries the version it was
        generated with (``Sample.meta["weight_version"]``), so the trainer measures how far off-policy it
        is."""
        ...

    def weights_changed(self, step: int) -> None:
        """The trainer changed the policy's weights to those of ``step``; called on the thread that changed
        them, right after the optimiser step (a backend generating from the policy itself counts from
        here)."""
        ...

    async def sync_weights(self, weights: WeightSource, step: int) -> None:
        """Make generation use the policy's current weights (labelled ``step``). Every process calls it."""
        ...

    def release(self) -> None:
        """The policy is about to train: give back the device memory generation holds, if the backend can
        (a colocated engine's sleep mode); the next sync or request takes it again."""
        ...

    @property
    def decode_stats(self) -> DecodeStats | None:
        """The counters of the backend's own decode loops (forwards, rows, host syncs), cumulative; None for
        a backend that decodes elsewhere (a vLLM engine or server)."""
        ...

    @property
    def sync_stats(self) -> dict[str, float]:
        """What the latest ``sync_weights`` sent (``sync/bytes``, ...), as metrics; empty when it sent
        nothing."""
        ...

    async def check_sync(self, weights: WeightSource, tokenizer: Any) -> None:
        """Raise if generation does not follow the policy's weights. Every process calls it."""
        ...


class OneProcessWeights:
    """A ``WeightSource`` for a policy held by one process alone (a benchmark, a test, a script): it is the
    main process, its state dict is the module's, and there is nobody to wait for."""

    is_main = True

    def __init__(self, module: Any) -> None:
        self.module = module

    def full_state_dict(self) -> Mapping[str, Any]:
        """The module's own state dict."""
        return dict(self.module.state_dict())

    def barrier(self) -> None:
        """One process: nothing to wait for."""
        return None


class InProcessWeights:
    """A base for backends whose generation always sees the policy's weights (no sync to do).

    ``executor`` None, a lock of its own, ``sync_weights`` and ``check_sync`` that do nothing: what a test's
    scripted backend or a backend sampling from the trainer's own module needs."""

    executor: concurrent.futures.Executor | None = None

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.weight_version = 0

    def weights_changed(self, step: int) -> None:
        """Generation reads the policy itself: from now on it uses the weights of ``step``."""
        self.weight_version = step

    async def sync_weights(self, weights: WeightSource, step: int) -> None:
        """Nothing to copy: generation reads the policy itself, now of version ``step``."""
        self.weight_version = step

    async def check_sync(self, weights: WeightSource, tokenizer: Any) -> None:
        """Nothing to check: generation reads the policy itself."""
        return None

    def release(self) -> None:
        """Nothing to give back: generation holds no memory of its own between steps."""
        return None

    @property
    def decode_stats(self) -> DecodeStats | None:
        """No decode loop of its own to count (a subclass that has one says so)."""
        return None

    @property
    def sync_stats(self) -> dict[str, float]:
        """Nothing is sent."""
        return {}


def sync_check_prompt(tokenizer: Any) -> list[int]:
    """The fixed chat prompt whose greedy continuation every backend's sync check compares."""
    from envs.chat import chat_ids

    return chat_ids(tokenizer, [{"role": "user", "content": "Describe the first thing you check."}])


async def compare_greedy(
    backend: InferenceBackend, weights: WeightSource, tokenizer: Any, tokens: int = 8
) -> None:
    """Raise if the backend's greedy continuation of a fixed prompt differs from the policy's.

    The policy's side runs on every process (under ZeRO-3 each forward pass gathers the sharded parameters
    collectively); only the main process asks the backend and compares."""
    import torch

    prompt = sync_check_prompt(tokenizer)
    policy = weights.module
    ids = torch.tensor([prompt], device=next(policy.parameters()).device)
    with torch.no_grad():
        local = policy.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=tokens,
            do_sample=False,
            **plain_generate_kwargs(),
        )[0, len(prompt) :].tolist()
    if not weights.is_main:
        return
    (served,) = await backend.generate(prompt, SamplingParams(n=1, temperature=0.0, max_tokens=tokens))
    if served.completion_ids != local[: len(served.completion_ids)]:
        raise RuntimeError(f"weight sync check failed: server {served.completion_ids} != trainer {local}")


_NEUTRAL_LOGITS_PROCESSING: dict[str, Any] = {
    "top_k": 0,
    "min_p": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "sequence_bias": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "exponential_decay_length_penalty": None,
    "renormalize_logits": False,
}


@functools.cache
def plain_generate_kwargs() -> dict[str, Any]:
    """``generate`` keyword arguments that switch off every logits processor a model's
    ``generation_config.json`` may turn on (top_k, min_p, repetition_penalty, ...): transformers fills each
    setting a call leaves unset from the model's file, which would change the sampled distribution and make
    the recorded logprobs differ from the trainer's ``log_softmax(logits / temperature)``."""
    from transformers import GenerationConfig

    known = GenerationConfig()
    return {k: v for k, v in _NEUTRAL_LOGITS_PROCESSING.items() if hasattr(known, k)}  # read-only: spread it
