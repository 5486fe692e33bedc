"""Exact and near-duplicate removal: word 3-gram Jaccard similarity, no embeddings, no new dependency.

Why this measure: synthetic runs hold hundreds to a few thousand items, so exact Jaccard over word 3-gram
sets (with an inverted index so that only items sharing a shingle are compared) is fast enough and, unlike
MinHash/LSH, gives the true similarity with no false negatives and no tuning of bands and rows; unlike
embeddings it needs no model, runs the same on every machine, and catches what matters here: a model
repeating itself near word for word. It does not catch paraphrases, which are not duplicates for training.

Items are taken in plan order; an item is a duplicate when its prompt or its hidden description is
identical (after normalising case and whitespace) to, or at least ``threshold`` similar to, that of an
earlier kept item. The result depends only on the items, never on the order they finished in.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Duplicate:
    """Why an item was removed."""

    of: str
    """The id of the earlier item it repeats."""
    field: str
    """``prompt`` or ``hidden_description``."""
    similarity: float
    """Word 3-gram Jaccard similarity (1.0 for an exact repeat)."""


def shingles(text: str, size: int = 3) -> frozenset[tuple[str, ...]]:
    """The word ``size``-grams of ``text`` (lower case); a shorter text is one shingle of all its words."""
    words = _WORD.findall(text.lower())
    if len(words) < size:
        return frozenset([tuple(words)])
    return frozenset(tuple(words[i : i + size]) for i in range(len(words) - size + 1))


def jaccard(a: frozenset[tuple[str, ...]], b: frozenset[tuple[str, ...]]) -> float:
    """|a & b| / |a | b| (1.0 for two empty sets)."""
    union = len(a | b)
    return len(a & b) / union if union else 1.0


class _Index:
    """Shingle sets of kept texts with an inverted index, for one field."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.exact: dict[str, str] = {}
        self.sets: dict[str, frozenset[tuple[str, ...]]] = {}
        self.postings: defaultdict[tuple[str, ...], list[str]] = defaultdict(list)

    def match(self, text: str) -> tuple[str, float] | None:
        norm = " ".join(text.lower().split())
        if norm in self.exact:
            return self.exact[norm], 1.0
        mine = shingles(text)
        shared: defaultdict[str, int] = defaultdict(int)
        for s in mine:
            for other in self.postings.get(s, ()):
                shared[other] += 1
        best: tuple[str, float] | None = None
        for other, count in shared.items():
            # |a & b| = count; |a | b| = |a| + |b| - count
            score = count / (len(mine) + len(self.sets[other]) - count)
            if score >= self.threshold and (best is None or score > best[1]):
                best = (other, score)
        return best

    def add(self, item_id: str, text: str) -> None:
        self.exact.setdefault(" ".join(text.lower().split()), item_id)
        mine = shingles(text)
        self.sets[item_id] = mine
        for s in mine:
            self.postings[s].append(item_id)


def find_duplicates(
    items: Sequence[tuple[str, dict[str, str]]], threshold: float = 0.8
) -> dict[str, Duplicate]:
    """Duplicates among ``items`` (``(id, {field: text})`` in plan order), by id."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must lie in (0, 1], got {threshold}")
    indexes: dict[str, _Index] = {}
    found: dict[str, Duplicate] = {}
    for item_id, texts in items:
        hit = None
        for field_name, text in texts.items():
            index = indexes.setdefault(field_name, _Index(threshold))
            match = index.match(text)
            if match is not None:
                hit = Duplicate(of=match[0], field=field_name, similarity=round(match[1], 4))
                break
        if hit is not None:
            found[item_id] = hit
            continue
        for field_name, text in texts.items():
            indexes.setdefault(field_name, _Index(threshold)).add(item_id, text)
    return found
