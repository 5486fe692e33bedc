"""``ScoredRollout.from_state`` for training: the rollout holds what the finished state says, read once."""

from __future__ import annotations

import math

import pytest

from envs.rollout import ScoredRollout
from envs.sequence import TokenSequence
from rubrics.advantages import ReplyCredit
from tests.support.rollouts import finished


def test_a_rollout_takes_its_fields_from_the_finished_state() -> None:
    state = finished(
        scenario="park",
        trajectory=[
            {"prompt_ids": [1], "completion_ids": [2, 3], "weight_version": 4},
            {"prompt_ids": [1, 2, 3, 9], "completion_ids": [5]},  # a turn the backend did not stamp
        ],
        sequence={
            "ids": [1, 2, 3, 9, 5],
            "loss_mask": [0, 1, 1, 0, 1],
            "logprobs": [0.0] * 5,
            "replies": [[1, 3], [4, 5]],
        },
        reward=0.5,
        advantage=0.25,
        reply_advantages=[0.25, -0.5],
        reply_credit=[{"node": "safety", "reward_to_go": 0.5}, {"node": "vitals", "reward_to_go": 0.0}],
        metrics={"req/safety": 1.0},
        stop_reason="incorrect",
        turn=2,
    )
    rollout = ScoredRollout.from_state(state)
    assert rollout.sequence == TokenSequence([1, 2, 3, 9, 5], [0, 1, 1, 0, 1], [0.0] * 5, [(1, 3), (4, 5)])
    assert (rollout.scenario, rollout.reward, rollout.advantage) == ("park", 0.5, 0.25)
    assert rollout.reply_credit == [ReplyCredit("safety", 0.5), ReplyCredit("vitals", 0.0)]
    # 2 + 1 sampled tokens; one stamped turn
    assert (rollout.completion_tokens, rollout.weight_versions, rollout.turn) == (3, [4], 2)
    assert (rollout.error, rollout.error_cause, rollout.is_truncated) == (None, None, False)
    # the credit per reply is written out as the state held it, just before the advantage
    assert list(rollout.to_dict())[-3:] == ["reply_credit", "reply_advantages", "advantage"]
    assert rollout.to_dict()["reply_credit"] == state["reply_credit"]


def test_a_failed_rollout_has_no_sequence_and_no_reward() -> None:
    failed = finished(
        error="BackendError: down", error_cause="BackendError", reward=math.nan, stop_reason="error"
    )
    rollout = ScoredRollout.from_state(failed)
    assert rollout.sequence is None and math.isnan(rollout.reward) and rollout.reply_advantages is None
    assert not rollout.healthy and rollout.error_cause == "BackendError"


def test_a_state_without_an_advantage_is_refused() -> None:
    state = finished()
    del state["advantage"]
    with pytest.raises(ValueError, match="field 'advantage' is missing"):
        ScoredRollout.from_state(state)
