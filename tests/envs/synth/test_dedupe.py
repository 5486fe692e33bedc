"""Near-duplicate removal: word 3-gram Jaccard with an inverted index."""

from __future__ import annotations

import pytest

from envs.synth.dedupe import find_duplicates, jaccard, shingles

LONG = "the caller reports a cyclist down on a wet country road at dusk with a bent front wheel and a helmet"


def test_jaccard_by_hand() -> None:
    # "a b c d" -> {abc, bcd}; "a b c e" -> {abc, bce}: 1 shared of 3 -> 1/3
    assert jaccard(shingles("a b c d"), shingles("a b c e")) == pytest.approx(1 / 3)
    assert jaccard(shingles("A  b, c"), shingles("a b c")) == 1.0


def test_exact_near_and_distinct() -> None:
    items = [
        ("1", {"prompt": LONG}),
        ("2", {"prompt": LONG.upper() + "  "}),  # exact after normalising
        ("3", {"prompt": LONG + " today"}),  # near: one trigram more
        ("4", {"prompt": "a child with a burn from a kettle in the kitchen, crying and alert"}),
        ("5", {"prompt": "a child with a burn from a kettle", "hidden_description": "x"}),
    ]
    found = find_duplicates(items, threshold=0.8)
    assert set(found) == {"2", "3"}
    assert found["2"].of == "1" and found["2"].similarity == 1.0
    assert found["3"].of == "1" and 0.8 <= found["3"].similarity < 1.0


def test_an_earlier_duplicate_does_not_hide_a_later_one() -> None:
    # "2" duplicates "1" and is dropped; "3" repeats "2" only, which was never kept: "3" is compared to "1"
    found = find_duplicates(
        [("1", {"p": LONG}), ("2", {"p": LONG}), ("3", {"p": "something else entirely here"})]
    )
    assert set(found) == {"2"}
    with pytest.raises(ValueError):
        find_duplicates([], threshold=0.0)
