"""Which training examples each step takes: a seeded walk over their indices that a checkpoint resumes.

``rollout.sampler`` picks one of two:

- ``shuffle`` (``DataCursor``): a fresh seeded shuffle of all the examples every epoch, taken in order.
- ``balanced`` (``BalancedSampler``): the examples split by their stratum (``Environment.stratum``; in the
  progressive-reveal environment the ground truth of the rubric's root, ``scene_safety=1.0`` or ``=0.0``),
  one ``DataCursor`` over each stratum, and the examples dealt from the strata in turn, in their sorted
  order. With ``rollout.prompts_per_step`` a multiple of the number of strata every step holds each stratum
  equally. Otherwise the turn carries over from one step to the next (2 strata, 3 prompts a step: 2 + 1,
  then 1 + 2), so a step's shares differ by at most one and every stratum gets the extra in turn. Each
  stratum walks all of its examples before it repeats one (a small stratum repeats sooner than a large one).

The state of either (``state()``, a JSON-serialisable dict) is what a checkpoint keeps as ``cursor``;
``make_sampler`` rebuilds the sampler from it, going on exactly where the uninterrupted walk would, and
refuses a state of the other sampler, of other strata or of a different number of examples.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

RESTART = "start a new logging.output_dir (or resume: false)"
"""What to do about a checkpoint's cursor that this run cannot continue."""


class Sampler(Protocol):
    """A seeded, resumable walk over example indices."""

    def take(self, k: int) -> list[int]:
        """The next ``k`` example indices."""
        ...

    def state(self) -> dict[str, Any]:
        """What a checkpoint needs to resume the walk (JSON-serialisable)."""
        ...


class DataCursor:
    """A seeded, resumable walk over example indices: a fresh shuffle every epoch."""

    def __init__(self, n: int, seed: int, epoch: int = 0, position: int = 0) -> None:
        if n < 1:
            raise ValueError("no training examples")
        self.n, self.seed, self.epoch, self.position = n, seed, epoch, position
        self._order = self._shuffle(epoch)

    def _shuffle(self, epoch: int) -> list[int]:
        order = list(range(self.n))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def take(self, k: int) -> list[int]:
        """The next ``k`` example indices."""
        out = []
        for _ in range(k):
            if self.position >= self.n:
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._shuffle(self.epoch)
            out.append(self._order[self.position])
            self.position += 1
        return out

    def state(self) -> dict[str, int]:
        """What a checkpoint needs to resume the walk."""
        return {"epoch": self.epoch, "position": self.position}

    @classmethod
    def restored(cls, n: int, seed: int, state: Mapping[str, Any], what: str = "") -> DataCursor:
        """The cursor over ``n`` examples at ``state`` (``state()`` of an earlier one); a position past the
        end of an epoch means the examples (``what``: which ones) changed, and is refused."""
        epoch, position = int(state["epoch"]), int(state["position"])
        if not 0 <= position <= n:
            raise ValueError(
                f"rollout.sampler: the checkpoint's data cursor is at example {position} of an epoch, and "
                f"this run has {n} training examples{what}: the examples changed; {RESTART}"
            )
        return cls(n, seed, epoch, position)


class BalancedSampler:
    """Equal shares of the strata: a ``DataCursor`` over each stratum's examples, the examples dealt from the
    strata in turn (their sorted order), the turn carried over from one ``take`` to the next."""

    def __init__(self, strata: Sequence[str | None], seed: int) -> None:
        self.members = _members(strata)
        """Stratum -> the indices of its examples, in the examples' order; strata sorted."""
        self.cursors = {key: DataCursor(len(m), _stratum_seed(seed, key)) for key, m in self.members.items()}
        """Stratum -> the walk over its own examples (positions in ``members[key]``)."""
        self.drawn = 0
        """Examples taken so far: the next comes from stratum ``drawn % len(members)``."""
        self.seed = seed
        """The run's seed; each stratum's cursor is seeded from it and the stratum's name."""

    def take(self, k: int) -> list[int]:
        """The next ``k`` example indices."""
        keys = list(self.members)
        out = []
        for _ in range(k):
            key = keys[self.drawn % len(keys)]
            (position,) = self.cursors[key].take(1)
            out.append(self.members[key][position])
            self.drawn += 1
        return out

    def state(self) -> dict[str, Any]:
        """What a checkpoint needs to resume the walk: how many examples were taken, and each stratum's size
        and cursor."""
        strata = {key: {"size": len(m), **self.cursors[key].state()} for key, m in self.members.items()}
        return {"sampler": "balanced", "drawn": self.drawn, "strata": strata}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``: ``state()`` of an earlier sampler over the same strata, of the same
        sizes."""
        saved = {str(key): int(s["size"]) for key, s in state["strata"].items()}
        ours = {key: len(m) for key, m in self.members.items()}
        if saved != ours:
            raise ValueError(
                f"rollout.sampler: the checkpoint's strata ({_sizes(saved)}) are not this run's "
                f"({_sizes(ours)}): the training examples changed; {RESTART}"
            )
        self.drawn = int(state["drawn"])
        for key, s in state["strata"].items():
            self.cursors[key] = DataCursor.restored(ours[key], _stratum_seed(self.seed, key), s, f" in {key}")


def make_sampler(
    kind: str, strata: Sequence[str | None], seed: int, state: Mapping[str, Any] | None = None
) -> Sampler:
    """The sampler ``rollout.sampler`` names over examples whose strata are ``strata`` (one entry per example,
    None where it has none), at ``state`` when a checkpoint saved one. Raises ``ValueError`` naming
    ``rollout.sampler`` when ``balanced`` has nothing to balance, or ``state`` is not one this run can
    continue."""
    if state is not None:
        saved = str(state.get("sampler", "shuffle"))
        if saved != kind:
            raise ValueError(
                f"rollout.sampler: the checkpoint's data cursor is the {saved!r} sampler's and this run's is "
                f"{kind!r}; resume with rollout.sampler={saved}, or {RESTART}"
            )
    if kind == "shuffle":
        if state is None:
            return DataCursor(len(strata), seed)
        return DataCursor.restored(len(strata), seed, state)
    if kind != "balanced":
        raise ValueError(f"rollout.sampler: unknown sampler {kind!r} (shuffle, balanced)")
    sampler = BalancedSampler(strata, seed)
    if state is not None:
        sampler.restore(state)
    return sampler


def stratum_shares(taken: Sequence[str | None], keys: Sequence[str]) -> dict[str, float]:
    """How many of a step's examples (their strata ``taken``) each stratum of ``keys`` gave, as metrics
    ``sampler/stratum/<key>`` (0 for a stratum the step missed; none without strata)."""
    counts = Counter(taken)
    return {f"sampler/stratum/{key}": float(counts[key]) for key in keys}


def _members(strata: Sequence[str | None]) -> dict[str, list[int]]:
    """Stratum -> the indices of its examples, strata sorted; ``ValueError`` unless there are at least two
    and every example has one."""
    if not strata:
        raise ValueError("no training examples")
    missing = [i for i, key in enumerate(strata) if key is None]
    if len(missing) == len(strata):
        raise ValueError(
            "rollout.sampler: 'balanced' shares each step out between the strata of the examples, and this "
            "environment gives its examples none (Environment.stratum); use 'shuffle'"
        )
    if missing:
        raise ValueError(
            f"rollout.sampler: 'balanced': {len(missing)} of {len(strata)} training examples have no stratum "
            f"(the first: example {missing[0]})"
        )
    members: dict[str, list[int]] = {}
    for i, key in enumerate(strata):
        assert key is not None
        members.setdefault(key, []).append(i)
    if len(members) < 2:
        raise ValueError(
            f"rollout.sampler: 'balanced' needs at least two strata to balance, and every training example "
            f"is in {next(iter(members))!r}; use 'shuffle'"
        )
    return {key: members[key] for key in sorted(members)}


def _stratum_seed(seed: int, key: str) -> int:
    """The seed of one stratum's cursor: from the run's seed and the stratum's name only (not from which
    other strata there are)."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{key}".encode()).digest()[:8], "big")


def _sizes(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{key}: {n} examples" for key, n in sorted(sizes.items())) or "none"
