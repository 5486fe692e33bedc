"""``LLMJudgeClient``: chat completions from any OpenAI-compatible endpoint, made safe for scoring at scale.

Made from a ``JudgeEndpoint`` (``LLMJudgeClient.from_endpoint``); every judge and grader asks it for a verdict
the same way, ``await client.ask(system_prompt, user_prompt, StructuredReply(parse, schema))``:

- the key is read from the environment variable *named* by ``api_key_env``; it is never logged, saved or
  shown in ``repr``;
- structured JSON output (``json_schema``, falling back to ``json_object``, then to plain text, when the
  server rejects it with a 400);
- one ``asyncio.Semaphore`` bounds the requests in flight; every judge built on one client shares it, and
  several clients can share one by passing ``semaphore=``;
- a total timeout on every request;
- retries with exponential backoff and full jitter on rate limits (429), server errors (5xx),
  timeouts, dropped connections and malformed verdicts (not JSON, cut mid-JSON, wrong keys or values);
- a cache of parsed verdicts keyed by the exact request (the most recent ``max_cached_verdicts``); a call
  that matches one still in flight waits for it instead of sending its own, so identical rollouts of a
  group cost one request;
- cost counters (``JudgeClientStats``: requests, retries, tokens, seconds), flat through ``snapshot()``;
- on plain ``http://`` endpoints, a lean keep-alive HTTP path (``transport.LeanChatPost``) instead of the
  openai SDK, which keeps the client's CPU per verdict well under a judge's latency;
- after the last attempt, ``JudgeError``: never a silent 0. Inside a ``Rubric`` that marks the rollout.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, cast

import openai

from rubrics.judges.base import JudgeError
from rubrics.judges.endpoint import JudgeEndpoint
from rubrics.judges.faults import MalformedVerdictError, fault_cause, is_retryable, parse_verdict
from rubrics.judges.stats import JudgeClientStats
from rubrics.judges.transport import LeanChatPost

logger = logging.getLogger(__name__)

T = TypeVar("T")
StructuredOutput = Literal["auto", "json_schema", "json_object", "none"]
_FALLBACK: dict[str, StructuredOutput] = {"json_schema": "json_object", "json_object": "none"}
_ENDPOINT = JudgeEndpoint.defaults()


@dataclass(frozen=True)
class StructuredReply(Generic[T]):
    """The shape a verdict must take: its JSON schema (sent as ``response_format``), the schema's name, and
    the parser that turns the reply's text into the verdict (raising ``MalformedVerdictError`` or
    ``ValueError`` on a reply that does not fit, which is retried)."""

    parse: Callable[[str], T]
    """Reply text -> verdict."""
    schema: dict[str, Any] | None
    """The JSON schema the server is asked to hold the reply to (None: plain JSON)."""
    name: str = "verdict"
    """The schema's name in the request."""


class LLMJudgeClient:
    """One OpenAI-compatible judge endpoint with bounded concurrency, timeouts, retries and a verdict cache.

    The endpoint's settings (address, model, key variable, concurrency, timeout, attempts) are a
    ``JudgeEndpoint``'s, with its defaults; ``from_endpoint`` makes a client from one."""

    # over 60 lines: each of the endpoint's settings is an argument with its own documented attribute; one
    # step (check the settings, keep them, open the HTTP client), nothing to split by concept
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        *,
        max_concurrency: int = _ENDPOINT["max_concurrency"],
        semaphore: asyncio.Semaphore | None = None,
        timeout_s: float = _ENDPOINT["timeout_s"],
        max_attempts: int = _ENDPOINT["max_attempts"],
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
        max_tokens: int = 2048,
        temperature: float = 0.0,
        structured_output: StructuredOutput = "auto",
        cache: bool = True,
        max_cached_verdicts: int = 100_000,
        extra_body: dict[str, Any] | None = None,
        lean_http: bool | None = None,
    ) -> None:
        _check_settings(
            max_concurrency=max_concurrency,
            max_attempts=max_attempts,
            max_tokens=max_tokens,
            max_cached_verdicts=max_cached_verdicts,
            timeout_s=timeout_s,
            backoff_initial_s=backoff_initial_s,
            backoff_max_s=backoff_max_s,
        )
        self.base_url = base_url
        """Endpoint root, e.g. ``http://127.0.0.1:8000/v1``."""
        self.model = model
        """Model name sent with every request."""
        self.api_key_env = api_key_env
        """Name of the environment variable holding the key (never the key itself)."""
        self.timeout_s = timeout_s
        """Total time allowed for one request."""
        self.max_attempts = max_attempts
        """Attempts per verdict, the first included."""
        self.max_tokens = max_tokens
        """Token budget of a verdict: large, so JSON is never cut mid-object."""
        self.temperature = temperature
        """Sampling temperature (0 makes the cache exact)."""
        self.structured_output = structured_output
        """``auto`` tries ``json_schema``, then ``json_object``, then plain text."""
        self.max_cached_verdicts = max_cached_verdicts
        """Verdicts the cache keeps; the least recently used goes first (bounds a long run's memory)."""
        self.extra_body = extra_body
        """Extra request fields for the server (e.g. vLLM sampling options)."""
        self.semaphore = semaphore or asyncio.Semaphore(max_concurrency)
        """Bounds the requests in flight; share it to bound a whole run."""
        self.stats = JudgeClientStats()
        """Counters of calls, retries, faults, failures, tokens and request seconds (``snapshot()``)."""
        self._mode: StructuredOutput = "json_schema" if structured_output == "auto" else structured_output
        self._cache: OrderedDict[str, Any] | None = OrderedDict() if cache else None
        self._in_flight: dict[str, _SharedRequest] = {}
        self.backoff_initial_s = backoff_initial_s
        """The first retry waits up to this long; each later one up to twice the one before."""
        self.backoff_max_s = backoff_max_s
        """No retry waits longer."""
        self.lean_http = base_url.startswith("http://") if lean_http is None else lean_http
        """POST through ``LeanChatPost`` (plain ``http://`` endpoints; the default there) instead of the
        openai SDK's client (TLS endpoints: hosted APIs)."""
        self._lean, self._client = self._connect()

    @classmethod
    def from_endpoint(cls, endpoint: JudgeEndpoint, **options: Any) -> LLMJudgeClient:
        """A client on ``endpoint``; ``options`` are the client's own keyword settings (``semaphore``,
        ``max_tokens``, ``temperature``, ``cache``, ``lean_http``, ...)."""
        return cls(
            endpoint.base_url,
            endpoint.model,
            endpoint.api_key_env,
            max_concurrency=endpoint.max_concurrency,
            timeout_s=endpoint.timeout_s,
            max_attempts=endpoint.max_attempts,
            **options,
        )

    def _connect(self) -> tuple[LeanChatPost | None, openai.AsyncOpenAI | None]:
        """The HTTP client ``lean_http`` chooses, holding the key named by ``api_key_env``."""
        key = self._read_key()
        if self.lean_http:
            url = f"{self.base_url.rstrip('/')}/chat/completions"
            return LeanChatPost(url, {"Authorization": f"Bearer {key}"}), None
        client = openai.AsyncOpenAI(
            base_url=self.base_url, api_key=key, max_retries=0, timeout=self.timeout_s
        )
        return None, client

    def _read_key(self) -> str:
        if self.api_key_env is None:
            return "EMPTY"  # local servers (vLLM) accept any key
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ValueError(
                f"the judge's API key variable {self.api_key_env!r} is not set in the environment"
            )
        return key

    def __repr__(self) -> str:
        return (
            f"LLMJudgeClient(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r})"
        )

    async def close(self) -> None:
        """Close the HTTP connections."""
        if self._lean is not None:
            await self._lean.aclose()
        if self._client is not None:
            await self._client.close()

    async def __aenter__(self) -> LLMJudgeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def request_key(self, messages: list[dict[str, Any]], schema: dict[str, Any] | None) -> str:
        """Cache key: a hash of everything that shapes the reply."""
        request = [
            self.base_url,
            self.model,
            messages,
            schema,
            self.max_tokens,
            self.temperature,
            self.extra_body,
        ]
        return hashlib.sha256(json.dumps(request, sort_keys=True, default=str).encode()).hexdigest()

    async def ask(self, system_prompt: str, user_prompt: str, reply: StructuredReply[T]) -> T:
        """One verdict of the shape ``reply`` gives, asked with a system and a user message: the one way
        judges (``rubrics.judges.llm``) and graders (``rubrics.criteria.autograders``) ask."""
        messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": user_prompt}]
        return await self.complete(messages, parse=reply.parse, schema=reply.schema, schema_name=reply.name)

    async def complete(
        self,
        messages: list[dict[str, Any]],
        parse: Callable[[str], T],
        schema: dict[str, Any] | None = None,
        schema_name: str = "verdict",
    ) -> T:
        """Ask for one verdict and ``parse`` it; retries until it parses or attempts run out (``JudgeError``).

        With the cache on, a request answered before is not sent again, and one identical to a request in
        flight waits for that one's verdict (a ``cache_hit`` either way)."""
        self.stats.calls += 1
        try:
            if self._cache is None:
                return await self._attempts(messages, parse, schema, schema_name)
            key = self.request_key(messages, schema)
            if key in self._cache:
                self.stats.cache_hits += 1
                self._cache.move_to_end(key)
                return cast(T, self._cache[key])
            shared = self._in_flight.get(key)
            if shared is None:
                task = asyncio.ensure_future(self._cached_attempts(key, messages, parse, schema, schema_name))
                shared = self._in_flight[key] = _SharedRequest(task)
                task.add_done_callback(lambda _: self._forget(key, shared))
            else:
                self.stats.cache_hits += 1
            return cast(T, await self._wait_for(key, shared))
        except JudgeError:
            self.stats.failures += 1
            raise

    async def _wait_for(self, key: str, shared: _SharedRequest) -> Any:
        """The shared request's verdict. A caller cancelled (its rollout given up) leaves the request to the
        others; when the last one is cancelled, the request is too, freeing its place in the semaphore."""
        shared.waiters += 1
        try:
            return await asyncio.shield(shared.task)
        finally:
            shared.waiters -= 1
            if shared.waiters == 0 and not shared.task.done():
                self._forget(key, shared)  # now: a new caller must not join a cancelled request
                shared.task.cancel()

    async def _cached_attempts(
        self,
        key: str,
        messages: list[dict[str, Any]],
        parse: Callable[[str], T],
        schema: dict[str, Any] | None,
        schema_name: str,
    ) -> T:
        result = await self._attempts(messages, parse, schema, schema_name)
        assert self._cache is not None
        self._cache[key] = result
        if len(self._cache) > self.max_cached_verdicts:
            self._cache.popitem(last=False)  # the least recently used
        return result

    def _forget(self, key: str, shared: _SharedRequest) -> None:
        """Drop a finished or abandoned request from the ones in flight (only itself, not a newer one)."""
        if self._in_flight.get(key) is shared:
            del self._in_flight[key]
        if shared.task.done() and not shared.task.cancelled():
            shared.task.exception()  # retrieved: a failure nobody awaits is not logged as never retrieved

    async def _attempts(
        self,
        messages: list[dict[str, Any]],
        parse: Callable[[str], T],
        schema: dict[str, Any] | None,
        schema_name: str,
    ) -> T:
        """Send the request until its reply parses, or raise ``JudgeError`` after the last attempt. A
        retryable fault waits ``backoff_wait_s`` first; any other fault ends the call at once.

        A plain loop rather than ``tenacity.AsyncRetrying``, which inspects its callbacks on every call: about
        0.04 ms of CPU per verdict, a seventh of the client's (``benchmarks/judge_bound.py``)."""
        attempt = 1
        while True:
            try:
                text, finish_reason = await self._request(messages, schema, schema_name)
                return parse_verdict(parse, text, finish_reason)
            except Exception as exc:
                cause = fault_cause(exc)
                self.stats.faults[cause] += 1
                if attempt >= self.max_attempts or not is_retryable(exc):
                    raise JudgeError(
                        f"judge {self.model!r} at {self.base_url}: no verdict after {attempt} attempt(s): "
                        f"{cause}: {self._why(exc)}"
                    ) from exc
                self.stats.retries += 1
                logger.debug("judge %s: attempt %d failed (%s); retrying", self.model, attempt, cause)
            await asyncio.sleep(self.backoff_wait_s(attempt))
            attempt += 1

    def _why(self, exc: Exception) -> str:
        """What went wrong in the last attempt: the error's message, or for a timeout (whose message is
        empty) the time it was given."""
        if isinstance(exc, TimeoutError) and not str(exc):
            return f"no answer within timeout_s = {self.timeout_s:g} s"
        return str(exc) or type(exc).__name__

    def backoff_wait_s(self, attempt: int) -> float:
        """The wait after failed attempt ``attempt`` (1-based): full jitter, uniform in
        ``[0, min(backoff_max_s, backoff_initial_s * 2 ** (attempt - 1))]``."""
        return random.uniform(
            0.0, min(self.backoff_max_s, self.backoff_initial_s * 2.0 ** min(attempt - 1, 60))
        )

    async def _request(
        self, messages: list[dict[str, Any]], schema: dict[str, Any] | None, schema_name: str
    ) -> tuple[str, str | None]:
        async with self.semaphore:
            self.stats.requests += 1
            start = time.perf_counter()
            try:
                async with asyncio.timeout(self.timeout_s):
                    response = await self._create(messages, schema, schema_name)
            finally:
                self.stats.seconds += time.perf_counter() - start
        self._count_usage(response)
        try:
            choice = response["choices"][0]
            content = choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            raise MalformedVerdictError(f"not a chat completion: {str(response)[:200]}") from None
        return str(content), choice.get("finish_reason")

    def _count_usage(self, response: Any) -> None:
        """Add the response's ``usage`` tokens to the stats (a server that sends none adds nothing)."""
        usage = response.get("usage") if isinstance(response, Mapping) else None
        if not isinstance(usage, Mapping):
            return
        for name in ("prompt_tokens", "completion_tokens"):
            count = usage.get(name)
            if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
                setattr(self.stats, name, getattr(self.stats, name) + count)

    async def _create(
        self, messages: list[dict[str, Any]], schema: dict[str, Any] | None, schema_name: str
    ) -> Any:
        while True:
            mode = self._mode
            extra: dict[str, Any] = {}
            if mode == "json_schema" and schema is not None:
                extra["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": schema_name, "schema": schema},
                }
            elif mode in ("json_schema", "json_object"):
                extra["response_format"] = {"type": "json_object"}
            payload: dict[str, Any] = {
                "model": self.model,
                "messages": messages,
                "max_tokens": self.max_tokens,
                "temperature": self.temperature,
                **extra,
                **(self.extra_body or {}),
            }
            try:
                return await self._post(payload)
            except openai.BadRequestError:
                if self.structured_output != "auto" or mode == "none":
                    raise
                self.stats.fallbacks += 1
                if self._mode == mode:
                    self._mode = _FALLBACK[mode]
                    logger.warning(
                        "judge %s rejected response_format %s; using %s", self.model, mode, self._mode
                    )

    async def _post(self, payload: dict[str, Any]) -> Any:
        """POST a chat completion; the reply's JSON, or the openai SDK's errors (both paths alike)."""
        if self._lean is not None:
            return await self._lean(payload)
        assert self._client is not None
        # The SDK's generic POST: the same errors, auth and base URL as ``chat.completions.create`` without
        # its per-call request transformation (a third of the client's CPU per verdict).
        return await self._client.post("/chat/completions", body=payload, cast_to=object)


@dataclass
class _SharedRequest:
    """One request in flight and the calls waiting for its verdict."""

    task: asyncio.Task[Any]
    """Sends the request (with its retries) and caches the verdict."""
    waiters: int = 0
    """Calls awaiting it now."""


def _check_settings(**settings: Any) -> None:
    """Counts (``max_*``) are whole numbers >= 1 and durations (``*_s``) finite numbers > 0; ``true`` is
    neither (``ValueError`` naming the setting, the expectation and the value)."""
    for name, value in settings.items():
        whole = name.startswith("max_")
        number = isinstance(value, int if whole else int | float) and not isinstance(value, bool)
        in_range = number and math.isfinite(value) and (value >= 1 if whole else value > 0)
        if not in_range:
            expected = "a whole number >= 1" if whole else "a number of seconds > 0"
            raise ValueError(f"LLMJudgeClient: {name} is invalid (expected {expected}, got {value!r})")
