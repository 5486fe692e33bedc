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


def _deep(turn: int, advantage: float, tokens_per_turn: int = 10) -> object:
    from tests.support.rollouts import scored

    steps = [
        {
            "prompt_ids": [1],
            "completion_ids": [2] * tokens_per_turn,
            "completion_logprobs": [0.0] * tokens_per_turn,
        }
    ]
    return scored(turn=turn, advantage=advantage, trajectory=steps * turn)


def test_depth_advantage_metrics_split_the_advantages_by_how_deep_each_rollout_went() -> None:
    """A group whose rollouts differ in depth: the deeper ones' mean advantage, the shallower ones', and the
    deeper ones' share of |advantage| x tokens; a group all of one depth counts in neither side."""
    from train.rollout_metrics import depth_advantage_metrics

    varied = [_deep(1, -1.0), _deep(1, -0.5), _deep(3, 0.5), _deep(3, 1.0)]  # mean depth 2
    level = [_deep(2, 0.3), _deep(2, -0.3)]
    out = depth_advantage_metrics([varied, level])
    assert out["advantage/deeper_mean"] == pytest.approx(0.75)
    assert out["advantage/shallower_mean"] == pytest.approx(-0.75)
    # deeper: (0.5 + 1.0) x 30 tokens = 45; all: 45 + (1.0 + 0.5) x 10 + (0.3 + 0.3) x 20 = 72
    assert out["advantage/deeper_token_share"] == pytest.approx(45 / 72)
    assert out["groups/depth_varies_frac"] == 0.5
    assert depth_advantage_metrics([]) == {}
