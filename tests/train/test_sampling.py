"""The samplers of ``rollout.sampler``: ``shuffle`` takes exactly the indices it always took; ``balanced``
gives every stratum an equal share of each step (the extra in turn), walks each stratum's examples before
repeating one, is seeded, resumes exactly from its saved state, and refuses what it cannot balance or
continue."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from train.sampling import DataCursor, Sampler, make_sampler, stratum_shares

# 5 examples of "safe", 3 of "unsafe", 4 of "unclear", interleaved as a data set would have them
STRATA: list[str | None] = ["safe", "unsafe", "safe", "unclear", "safe", "unsafe", "unclear"]
STRATA += ["safe", "unclear", "unsafe", "safe", "unclear"]
MEMBERS = {key: [i for i, s in enumerate(STRATA) if s == key] for key in ("safe", "unsafe", "unclear")}


class OldDataCursor:
    """The data cursor before ``rollout.sampler`` existed, as ``train/orchestrator.py`` had it (27d4679)."""

    def __init__(self, n: int, seed: int, epoch: int = 0, position: int = 0) -> None:
        self.n, self.seed, self.epoch, self.position = n, seed, epoch, position
        self._order = self._shuffle(epoch)

    def _shuffle(self, epoch: int) -> list[int]:
        order = list(range(self.n))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def take(self, k: int) -> list[int]:
        out = []
        for _ in range(k):
            if self.position >= self.n:
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._shuffle(self.epoch)
            out.append(self._order[self.position])
            self.position += 1
        return out


def _steps(sampler: Sampler, steps: int, per_step: int) -> list[list[int]]:
    return [sampler.take(per_step) for _ in range(steps)]


def _saved(sampler: Sampler) -> dict[str, Any]:
    """The sampler's state as a checkpoint's ``trainer_state.json`` gives it back."""
    return json.loads(json.dumps(sampler.state()))


def test_cursor_walks_a_fresh_seeded_shuffle_every_epoch() -> None:
    # seed 7, n 5: epoch e is range(5) shuffled by random.Random(7 * 1_000_003 + e):
    # epoch 0 [3, 0, 2, 4, 1], epoch 1 [0, 2, 3, 4, 1], epoch 2 [1, 4, 0, 2, 3]
    cursor = DataCursor(5, seed=7)
    assert cursor.take(7) == [3, 0, 2, 4, 1, 0, 2]
    assert cursor.state() == {"epoch": 1, "position": 2}
    assert cursor.take(4) == [3, 4, 1, 1]
    assert cursor.state() == {"epoch": 2, "position": 1}
    with pytest.raises(ValueError, match="no training examples"):
        DataCursor(0, seed=7)


@pytest.mark.parametrize(("n", "seed", "per_step"), [(48, 0, 2), (5, 7, 2), (12, 3, 5), (7, 7926, 3)])
def test_the_shuffle_sampler_takes_the_indices_of_the_old_cursor(n: int, seed: int, per_step: int) -> None:
    old = OldDataCursor(n, seed)
    want = [old.take(per_step) for _ in range(3 * n)]  # several epochs
    assert _steps(make_sampler("shuffle", [None] * n, seed), 3 * n, per_step) == want
    # strata change nothing about its order, and a saved state resumes it where the old one would
    resumed = make_sampler("shuffle", ["a", "b"] * (n // 2) + ["a"] * (n % 2), seed)
    first = _steps(resumed, n, per_step)
    again = make_sampler("shuffle", [None] * n, seed, _saved(resumed))
    assert first + _steps(again, 2 * n, per_step) == want
    assert _saved(again) == {"epoch": old.epoch, "position": old.position}  # the old checkpoint format


@pytest.mark.parametrize("per_step", [3, 6])
def test_every_balanced_step_holds_each_stratum_equally(per_step: int) -> None:
    sampler = make_sampler("balanced", STRATA, seed=0)
    for indices in _steps(sampler, 20, per_step):
        counts = Counter(STRATA[i] for i in indices)
        assert counts == dict.fromkeys(MEMBERS, per_step // 3)


def test_when_the_step_is_not_a_multiple_of_the_strata_each_takes_the_extra_in_turn() -> None:
    strata = STRATA[:6]  # safe 0 2 4, unsafe 1 5, unclear 3: sorted "safe", "unclear", "unsafe"
    sampler = make_sampler("balanced", strata, seed=0)
    # 2 a step, dealt in turn over 3 strata: (safe, unclear), (unsafe, safe), (unclear, unsafe), ...
    got = [[strata[i] for i in step] for step in _steps(sampler, 3, 2)]
    assert got == [["safe", "unclear"], ["unsafe", "safe"], ["unclear", "unsafe"]]
    sampler = make_sampler("balanced", ["x", "y"] * 4, seed=0)
    shares = [Counter(i % 2 for i in step) for step in _steps(sampler, 4, 3)]
    assert shares == [{0: 2, 1: 1}, {0: 1, 1: 2}] * 2  # x is even, y odd: 2 + 1, then 1 + 2


def test_each_stratum_walks_all_of_its_examples_before_repeating_one() -> None:
    sampler = make_sampler("balanced", STRATA, seed=1)
    taken = [i for step in _steps(sampler, 40, 3) for i in step]  # 40 of each stratum
    orders = []
    for key, members in MEMBERS.items():
        walk = [i for i in taken if STRATA[i] == key]
        assert len(walk) == 40
        epochs = [walk[e : e + len(members)] for e in range(0, 40 - len(members) + 1, len(members))]
        assert all(sorted(epoch) == members for epoch in epochs), key
        orders.append(len({tuple(epoch) for epoch in epochs}))
    assert all(n > 1 for n in orders)  # a fresh shuffle each epoch, not one order repeated


def test_balanced_is_seeded() -> None:
    def walk(seed: int) -> list[list[int]]:
        return _steps(make_sampler("balanced", STRATA, seed), 10, 3)

    assert walk(5) == walk(5)
    assert walk(5) != walk(6)


@pytest.mark.parametrize(("kind", "per_step"), [("balanced", 3), ("balanced", 2), ("shuffle", 3)])
@pytest.mark.parametrize("stop", [1, 4, 7])
def test_a_saved_state_resumes_exactly_where_the_uninterrupted_walk_goes(
    kind: str, per_step: int, stop: int
) -> None:
    want = _steps(make_sampler(kind, STRATA, seed=3), 12, per_step)
    first = make_sampler(kind, STRATA, seed=3)
    got = _steps(first, stop, per_step)
    resumed = make_sampler(kind, STRATA, seed=3, state=_saved(first))
    assert got + _steps(resumed, 12 - stop, per_step) == want


def test_the_balanced_state_says_what_it_walks() -> None:
    sampler = make_sampler("balanced", ["x", "y", "x"], seed=0)
    sampler.take(3)  # x, y, x: the x cursor finished its epoch of 2
    assert _saved(sampler) == {
        "sampler": "balanced",
        "drawn": 3,
        "strata": {"x": {"size": 2, "epoch": 0, "position": 2}, "y": {"size": 1, "epoch": 0, "position": 1}},
    }


@pytest.mark.parametrize(
    ("strata", "message"),
    [
        ([None, None], "rollout.sampler: 'balanced' .* this environment gives its examples none"),
        (
            ["a", None, "b", None],
            r"rollout.sampler: 'balanced': 2 of 4 training examples have no stratum .*1\)",
        ),
        (
            ["a", "a"],
            "rollout.sampler: 'balanced' needs at least two strata .* every training example is in 'a'",
        ),
        ([], "no training examples"),
    ],
)
def test_balanced_refuses_what_it_cannot_balance(strata: Sequence[str | None], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_sampler("balanced", strata, seed=0)


def test_a_saved_state_of_another_sampler_or_other_examples_is_refused() -> None:
    balanced = make_sampler("balanced", STRATA, seed=0)
    balanced.take(4)
    shuffle = make_sampler("shuffle", STRATA, seed=0)
    shuffle.take(4)
    with pytest.raises(
        ValueError, match=r"rollout.sampler: .* the 'balanced' sampler's and this run's is 'shuffle'"
    ):
        make_sampler("shuffle", STRATA, seed=0, state=_saved(balanced))
    with pytest.raises(
        ValueError, match=r"rollout.sampler: .* the 'shuffle' sampler's and this run's is 'balanced'"
    ):
        make_sampler("balanced", STRATA, seed=0, state=_saved(shuffle))
    with pytest.raises(
        ValueError, match=r"strata \(safe: 5 examples, unclear: 4 examples, unsafe: 3 examples\)"
    ):
        make_sampler("balanced", [*STRATA, "unsafe"], seed=0, state=_saved(balanced))
    with pytest.raises(ValueError, match=r"strata .* are not this run's \(safe: 5 examples, x: 7 examples\)"):
        make_sampler("balanced", ["x" if s != "safe" else s for s in STRATA], seed=0, state=_saved(balanced))
    with pytest.raises(ValueError, match="at example 4 of an epoch, and this run has 3 training examples"):
        make_sampler("shuffle", STRATA[:3], seed=0, state=_saved(shuffle))


def test_the_shares_name_every_stratum_and_count_the_step_s_examples() -> None:
    assert stratum_shares(["b", "b", None], ["a", "b"]) == {
        "sampler/stratum/a": 0.0,
        "sampler/stratum/b": 2.0,
    }
    assert stratum_shares([None, None], []) == {}
