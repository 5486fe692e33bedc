"""The diversity and repetition metrics of replies (hand-derived values)."""

from __future__ import annotations

import pytest

from train.rollout_metrics import diversity_metrics


def test_diversity_metrics_hand_derived() -> None:
    texts = [
        "Call EMS now.",  # words: call ems now -> bigrams (call ems) (ems now)
        "  Call   EMS now. ",  # the same text after whitespace normalisation; the same two bigrams
        "stop stop stop stop stop stop",  # 5 bigrams (stop stop); the 4-gram (stop x4) occurs 3 times
        "call EMS",  # a different text; bigram (call ems) again
    ]
    metrics = diversity_metrics(texts)
    # distinct texts: "Call EMS now.", "stop stop ...", "call EMS" -> 3 of 4
    assert metrics["distinct_fraction"] == 3 / 4
    # bigrams: 2 + 2 + 5 + 1 = 10; distinct: (call ems), (ems now), (stop stop) = 3
    assert metrics["distinct_2"] == 3 / 10
    # only the third text has a 4-gram occurring >= 3 times
    assert metrics["repetition_rate"] == 1 / 4


def test_repetition_threshold() -> None:
    twice = "a b c d a b c d"  # the 4-gram (a b c d) occurs twice: not a loop at the default threshold
    assert diversity_metrics([twice])["repetition_rate"] == 0.0
    assert diversity_metrics([twice], min_count=2)["repetition_rate"] == 1.0
    # 3-grams: (a b c) occurs twice as well; (b c d) twice; with n=3, min_count=2 it is a loop
    assert diversity_metrics([twice], n=3, min_count=2)["repetition_rate"] == 1.0


def test_diversity_edge_cases() -> None:
    assert diversity_metrics(["one", "two"]) == {
        "distinct_fraction": 1.0,
        "distinct_2": 0.0,  # no bigram at all
        "repetition_rate": 0.0,
    }
    with pytest.raises(ValueError):
        diversity_metrics([])
