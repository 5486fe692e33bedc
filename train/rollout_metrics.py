"""Metrics of one step's rollouts: rewards, per reward function and requirement, advantages, lengths,
turns, depth, stop reasons, diversity, credit per requirement node. Plain Python over the rollouts."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from envs.rollout import ScoredRollout

_WORD = re.compile(r"\w+")
_SPACE = re.compile(r"\s+")


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def depth_advantage_metrics(groups: Sequence[Sequence[ScoredRollout]]) -> dict[str, float]:
    """How the advantages of the trained groups (``groups``: the kept ones) split by how deep each rollout
    went, against its group's mean number of model turns: ``advantage/deeper_mean`` and
    ``advantage/shallower_mean`` (the mean advantage of the rollouts that went deeper, and of those that
    stopped earlier), ``advantage/deeper_token_share`` (their share of the loss's weight, the sum of
    |advantage| x completion tokens: a deeper rollout has more tokens) and ``groups/depth_varies_frac``
    (groups whose rollouts differ in depth). In a progressive-reveal environment a deeper rollout got more
    requirements right, so its advantage should be positive; none when no group was kept."""
    if not groups:
        return {}
    deeper: list[float] = []
    shallower: list[float] = []
    weight = {"deeper": 0.0, "all": 0.0}
    varies = 0
    for group in groups:
        healthy = [r for r in group if r.healthy]
        if not healthy:
            continue
        depth = sum(r.turn for r in healthy) / len(healthy)
        varies += any(r.turn != healthy[0].turn for r in healthy)
        for r in healthy:
            w = abs(r.advantage) * r.completion_tokens
            weight["all"] += w
            if r.turn > depth:
                deeper.append(r.advantage)
                weight["deeper"] += w
            elif r.turn < depth:
                shallower.append(r.advantage)
    out = {"groups/depth_varies_frac": varies / len(groups)}
    if deeper:
        out["advantage/deeper_mean"] = sum(deeper) / len(deeper)
    if shallower:
        out["advantage/shallower_mean"] = sum(shallower) / len(shallower)
    if weight["all"] > 0:
        out["advantage/deeper_token_share"] = weight["deeper"] / weight["all"]
    return out


def first_reply(rollout: ScoredRollout) -> str:
    """The policy's first reply (what diversity is measured on)."""
    completion = rollout.completion
    if isinstance(completion, list):
        return next((m.get("content", "") for m in completion if m.get("role") == "assistant"), "")
    return str(completion or "")


def error_causes(rollouts: Sequence[ScoredRollout]) -> Counter[str]:
    """How many rollouts failed, by cause (``error_cause``; ``unknown`` when only ``error`` is set)."""
    return Counter(r.error_cause or "unknown" for r in rollouts if r.error)


def rollout_metrics(rollouts: Sequence[ScoredRollout], advantages: Sequence[float]) -> dict[str, float]:
    """Step metrics of every rollout (errored ones counted, left out of reward statistics)."""
    healthy = [r for r in rollouts if not r.error and math.isfinite(r.reward)]
    out: dict[str, float] = {
        "rollouts": float(len(rollouts)),
        "errored_fraction": 1 - len(healthy) / max(1, len(rollouts)),
    }
    out["reward/mean"], out["reward/std"] = _mean_std([r.reward for r in healthy])
    per_metric: dict[str, list[float]] = {}
    for r in healthy:
        for key, value in r.metrics.items():
            if math.isfinite(value) and not key.startswith("stop/"):
                per_metric.setdefault(key, []).append(value)
    for key, values in per_metric.items():
        prefix = "" if key.startswith(("req/", "errors/")) else "reward_fn/"
        out[f"{prefix}{key}"] = sum(values) / len(values)
    if advantages:
        out["advantage/mean"], out["advantage/std"] = _mean_std(list(advantages))
        out["advantage/abs_mean"] = sum(abs(a) for a in advantages) / len(advantages)
    lengths = [r.completion_tokens for r in rollouts]
    out["length/completion_tokens_mean"] = sum(lengths) / max(1, len(lengths))
    out["length/truncated_fraction"] = sum(r.is_truncated for r in rollouts) / max(1, len(rollouts))
    out["turns/mean"] = sum(r.turn for r in rollouts) / max(1, len(rollouts))
    # per-rollout time in the backend and in the rubric (rollouts overlap: these are not shares of the step)
    pairs = (
        ("generation_ms", "rollout_generate_s"),
        ("scoring_ms", "rollout_score_s"),
        ("judge_ms", "rollout_judge_s"),
    )
    for key, name in pairs:
        spent = [float(r.timing.get(key, 0.0)) / 1000.0 for r in rollouts]
        out[f"time/{name}"] = sum(spent) / max(1, len(spent))
    for cause, count in error_causes(rollouts).items():
        out[f"errored/{cause}"] = count / len(rollouts)
    stops = Counter(r.stop_reason or "none" for r in rollouts)
    for reason, count in stops.items():
        out[f"stop/{reason}"] = count / len(rollouts)
    out.update(
        {f"diversity/{k}": v for k, v in diversity_metrics([first_reply(r) for r in rollouts]).items()}
    )
    out.update(reply_credit_metrics(rollouts))
    return out


def reply_credit_metrics(rollouts: Sequence[ScoredRollout]) -> dict[str, float]:
    """Per requirement node, over the replies credited one by one (``ScoredRollout.reply_credit``, credit per
    reply): ``credit/<node>/replies`` (how many answered it), ``reward_to_go`` and ``advantage_abs`` (means),
    and ``zero_frac`` (the share whose advantage is 0.0: alone at the node, or no spread there). Empty under
    episode credit."""
    by_node: dict[str, list[tuple[float, float]]] = {}
    for r in rollouts:
        for credit, advantage in zip(r.reply_credit or [], r.reply_advantages or [], strict=True):
            by_node.setdefault(credit.node, []).append((credit.reward_to_go, advantage))
    out: dict[str, float] = {}
    for node, pairs in sorted(by_node.items()):
        n = len(pairs)
        out[f"credit/{node}/replies"] = float(n)
        out[f"credit/{node}/reward_to_go"] = sum(r for r, _ in pairs) / n
        out[f"credit/{node}/advantage_abs"] = sum(abs(a) for _, a in pairs) / n
        out[f"credit/{node}/zero_frac"] = sum(a == 0.0 for _, a in pairs) / n
    return out


def sample_rows(rollouts: Sequence[ScoredRollout], limit: int = 4) -> list[dict[str, Any]]:
    """A few rollouts as rows of the samples table (``samples.jsonl``): the one place a step's rollouts
    become plain data."""
    rows = []
    for r in list(rollouts)[:limit]:
        rows.append(
            {
                "scenario": str(r.info.get("scenario", "")),
                "reward": r.reward,
                "stop": r.stop_reason,
                "conversation": "\n".join(
                    f"[{m['role']}] {m['content']}" for m in r.completion or [] if isinstance(m, dict)
                ),
            }
        )
    return rows


def diversity_metrics(texts: list[str], *, n: int = 4, min_count: int = 3) -> dict[str, float]:
    """Diversity and repetition of a batch of completions (pass each rollout's model text, joined).

    Words are ``\\w+`` runs of the lower-cased text.

    - ``distinct_fraction`` = (distinct completions) / (completions), comparing texts with surrounding
      whitespace stripped and inner whitespace runs collapsed to one space. 1.0: no two are alike.
    - ``distinct_2`` = (distinct word bigrams over the whole batch) / (word bigrams over the whole batch),
      the corpus-level distinct-2 of Li et al. (2016); 0.0 when the batch has no bigram at all.
    - ``repetition_rate`` = fraction of completions in which some word ``n``-gram occurs at least
      ``min_count`` times (default: a 4-gram three times), the signature of a repetition loop.

    Raises:
        ValueError: ``texts`` is empty.
    """
    if not texts:
        raise ValueError("diversity_metrics needs at least one completion")
    normalised = [_SPACE.sub(" ", text).strip() for text in texts]
    words = [_WORD.findall(text.lower()) for text in texts]
    bigrams = [tuple(w[i : i + 2]) for w in words for i in range(len(w) - 1)]
    looping = sum(1 for w in words if _has_repeated_ngram(w, n, min_count))
    return {
        "distinct_fraction": len(set(normalised)) / len(texts),
        "distinct_2": len(set(bigrams)) / len(bigrams) if bigrams else 0.0,
        "repetition_rate": looping / len(texts),
    }


def _has_repeated_ngram(words: list[str], n: int, min_count: int) -> bool:
    counts = Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    return any(count >= min_count for count in counts.values())
