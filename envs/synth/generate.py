"""Generators: where the synthetic text comes from.

``EndpointGenerator``: any OpenAI-compatible endpoint through the judge client (``LLMJudgeClient``), so the
requests get its machinery: one semaphore bounding the requests in flight, a total timeout per request,
retries with backoff on rate limits, server errors, timeouts, dropped connections and replies that do not
parse (not JSON, cut at ``max_tokens``), structured output (``json_schema``, falling back to
``json_object`` and plain text when the server rejects it) and fault counters by cause.

``LocalGenerator``: the in-process transformers backend (``LocalBackend``, built by
``envs.build.make_backend`` as the trainer's and ``rubric-grpo eval``'s are), no server needed; concurrent
requests share its batched ``generate``; a reply that does not parse is sampled again, up to the same number
of attempts. No structured output: a small model's malformed replies are counted, not hidden.

Both raise ``GenerationError`` after the last attempt; the pipeline drops the item and counts why.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from rubrics.judges.base import JudgeError
from rubrics.judges.client import LLMJudgeClient
from rubrics.judges.faults import MalformedVerdictError, parse_verdict
from rubrics.judges.stats import JudgeClientStats

T = TypeVar("T")


class GenerationError(RuntimeError):
    """No usable reply after the last attempt; the message names the cause."""


class Generator(Protocol):
    """Answers chat requests with text that ``parse`` accepts."""

    stats: JudgeClientStats
    """Requests, retries and faults by cause."""

    async def complete(
        self,
        messages: list[dict[str, Any]],
        parse: Callable[[str], T],
        schema: dict[str, Any] | None = None,
        schema_name: str = "scenario",
    ) -> T:
        """``parse(reply)``; ``GenerationError`` when no attempt parses."""
        ...

    async def close(self) -> None:
        """Release connections or the model."""
        ...


def parse_json_object(text: str) -> tuple[str, dict[str, Any]]:
    """The reply and the JSON object it consists of; ``ValueError`` (retried) when there is none.

    The object must span the reply (from its first ``{`` to its last ``}``, a code fence around it
    allowed): unlike a judge's verdict, a scenario cut at ``max_tokens`` still contains complete inner
    objects, which must not pass for the reply."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError(f"no JSON object in the reply {text[:80]!r}")
    try:
        data = json.loads(text[start : end + 1])
    except ValueError as exc:
        raise ValueError(f"the reply is not one JSON object: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("the reply is not a JSON object")
    return text, data


class EndpointGenerator:
    """An OpenAI-compatible endpoint, through ``LLMJudgeClient`` (see the module docstring)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        *,
        concurrency: int = 8,
        temperature: float = 0.7,
        max_tokens: int = 2048,
        timeout_s: float = 120.0,
        max_attempts: int = 3,
        backoff_initial_s: float = 0.5,
    ) -> None:
        self.client = LLMJudgeClient(
            base_url,
            model,
            api_key_env,
            max_concurrency=concurrency,
            timeout_s=timeout_s,
            max_attempts=max_attempts,
            backoff_initial_s=backoff_initial_s,
            backoff_max_s=10.0,
            max_tokens=max_tokens,
            temperature=temperature,
            cache=False,
        )
        """The client (its semaphore bounds the requests in flight)."""
        self.stats = self.client.stats

    async def complete(
        self,
        messages: list[dict[str, Any]],
        parse: Callable[[str], T],
        schema: dict[str, Any] | None = None,
        schema_name: str = "scenario",
    ) -> T:
        try:
            return await self.client.complete(messages, parse, schema, schema_name)
        except JudgeError as exc:  # the client words it for judges: "judge M at URL: no verdict after ..."
            message = str(exc).replace("judge ", "generator ", 1).replace("no verdict", "no usable reply", 1)
            raise GenerationError(message) from exc

    async def close(self) -> None:
        await self.client.close()


class LocalGenerator:
    """The in-process backend on a local model folder (see the module docstring)."""

    def __init__(
        self,
        model_dir: str,
        *,
        temperature: float = 0.7,
        max_tokens: int = 1024,
        max_attempts: int = 2,
        seed: int = 0,
    ) -> None:
        import torch

        from envs.backends.local import LocalBackend
        from envs.build import make_backend

        torch.manual_seed(seed)
        backend, self.tokenizer = make_backend("local", model_dir)
        assert isinstance(backend, LocalBackend)  # "local" is one; the context check reads its model
        self.backend = backend
        """The batched transformers backend."""
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_attempts = max_attempts
        self.stats = JudgeClientStats()

    async def complete(
        self,
        messages: list[dict[str, Any]],
        parse: Callable[[str], T],
        schema: dict[str, Any] | None = None,
        schema_name: str = "scenario",
    ) -> T:
        from envs.backends.base import SamplingParams
        from envs.chat import chat_ids

        self.stats.calls += 1
        ids = chat_ids(self.tokenizer, messages)
        context = getattr(self.backend.model.config, "max_position_embeddings", None)
        if isinstance(context, int) and len(ids) + self.max_tokens > context:
            self.stats.failures += 1
            self.stats.faults["too_long"] += 1
            raise GenerationError(
                f"local model: too_long: the request is {len(ids)} tokens; with max_tokens {self.max_tokens} "
                f"it exceeds the model's context of {context}"
            )
        params = SamplingParams(temperature=self.temperature, max_tokens=self.max_tokens)
        error: Exception | None = None
        for attempt in range(self.max_attempts):
            if attempt:
                self.stats.retries += 1
            self.stats.requests += 1
            (sample,) = await self.backend.generate(ids, params)
            try:
                return parse_verdict(parse, sample.text, sample.finish_reason)
            except MalformedVerdictError as exc:
                error = exc
                self.stats.faults["malformed"] += 1
        self.stats.failures += 1
        raise GenerationError(
            f"local model: no usable reply after {self.max_attempts} attempt(s): malformed: {error}"
        )

    async def close(self) -> None:
        await self.backend.close()
