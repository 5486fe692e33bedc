"""``JudgeClientStats``: the cost counters of one ``LLMJudgeClient`` (calls, requests, retries, cache hits,
failures, tokens, request seconds, faults by cause), flat as ``judge/<name>`` and ``judge/faults/<cause>``
metrics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass
class JudgeClientStats:
    """Counters of one client, for logging and tests; ``snapshot()`` gives them as flat metrics."""

    calls: int = 0
    """Verdicts asked for (cache hits included)."""
    requests: int = 0
    """HTTP requests sent (first attempts and retries)."""
    retries: int = 0
    """Attempts after a retryable fault."""
    cache_hits: int = 0
    """Verdicts served from the cache, or shared with an identical call in flight."""
    fallbacks: int = 0
    """Requests the server refused for their ``response_format`` and that were sent again in a simpler form
    (``json_schema``, then ``json_object``, then plain text parsed and retried)."""
    failures: int = 0
    """Calls that raised ``JudgeError`` after their last attempt."""
    prompt_tokens: int = 0
    """Prompt tokens of every answered request, from the response's ``usage`` (0 where it has none)."""
    completion_tokens: int = 0
    """Completion tokens of every answered request, from the response's ``usage`` (0 where it has none)."""
    seconds: float = 0.0
    """Wall time of the HTTP requests, summed (concurrent requests each count in full; waits for the
    semaphore and backoff sleeps do not count)."""
    faults: Counter[str] = field(default_factory=Counter)
    """Faults seen, by cause: ``rate_limit``, ``server_error``, ``timeout``, ``connection``, ``malformed``,
    ..."""

    def snapshot(self) -> dict[str, float]:
        """The counters as flat metrics: ``judge/calls``, ``judge/requests``, ``judge/retries``,
        ``judge/cache_hits``, ``judge/fallbacks``, ``judge/failures``, ``judge/prompt_tokens``,
        ``judge/completion_tokens``, ``judge/seconds``, and ``judge/faults/<cause>`` for each cause seen (why
        attempts failed)."""
        out = {f"judge/{name}": float(getattr(self, name)) for name in SNAPSHOT_FIELDS}
        out.update({f"judge/faults/{cause}": float(n) for cause, n in sorted(self.faults.items())})
        return out

    def since(self, before: Mapping[str, float]) -> dict[str, float]:
        """What was added after ``before`` (an earlier ``snapshot()``): a step's judge cost."""
        return snapshot_delta(before, self.snapshot())


SNAPSHOT_FIELDS = (
    "calls",
    "requests",
    "retries",
    "cache_hits",
    "fallbacks",
    "failures",
    "prompt_tokens",
    "completion_tokens",
    "seconds",
)
"""The ``JudgeClientStats`` counters in ``snapshot()``, each as ``judge/<name>``."""


def snapshot_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """``after - before`` key by key (a key missing from ``before`` counts from 0)."""
    return {key: value - before.get(key, 0.0) for key, value in after.items()}
