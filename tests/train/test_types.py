"""``ScoredRollout.from_rollout`` for training: the scored rollout holds what the finished ``Rollout`` and its
credit say, read once."""

from __future__ import annotations

import math

import pytest

from envs.rollout import ScoredRollout
from rubrics.advantages import ReplyCredit, RolloutCredit
from rubrics.types import Rollout, TokenSequence
from tests.support.rollouts import finished


def test_a_rollout_takes_its_fields_from_the_finished_rollout_and_its_credit() -> None:
    finished_rollout = Rollout(
        prompt=[{"role": "user", "content": "play park"}],
        completion=[{"role": "assistant", "content": "ok"}],
        info={"scenario": "park"},
        trajectory=[
            {"prompt_ids": [1], "completion_ids": [2, 3], "weight_version": 4},
            {"prompt_ids": [1, 2, 3, 9], "completion_ids": [5]},  # a turn the backend did not stamp
        ],
        sequence=TokenSequence([1, 2, 3, 9, 5], [0, 1, 1, 0, 1], [0.0] * 5, [(1, 3), (4, 5)]),
        reward=0.5,
        metrics={"req/safety": 1.0},
        stop_reason="incorrect",
        turn=2,
    )
    credit = RolloutCredit(
        0.25, [ReplyCredit("safety", 0.5), ReplyCredit("vitals", 0.0)], reply_advantages=[0.25, -0.5]
    )
    rollout = ScoredRollout.from_rollout(finished_rollout, credit)
    assert rollout.sequence == TokenSequence([1, 2, 3, 9, 5], [0, 1, 1, 0, 1], [0.0] * 5, [(1, 3), (4, 5)])
    assert (rollout.scenario, rollout.reward, rollout.advantage) == ("park", 0.5, 0.25)
    assert rollout.reply_credit == [ReplyCredit("safety", 0.5), ReplyCredit("vitals", 0.0)]
    assert rollout.reply_advantages == [0.25, -0.5]
    # 2 + 1 sampled tokens; one stamped turn
    assert (rollout.completion_tokens, rollout.weight_versions, rollout.turn) == (3, [4], 2)
    assert (rollout.error, rollout.error_cause, rollout.is_truncated) == (None, None, False)
    # the credit per reply is written out as plain data, just before the advantage
    assert list(rollout.to_dict())[-3:] == ["reply_credit", "reply_advantages", "advantage"]
    assert rollout.to_dict()["reply_credit"] == [
        {"node": "safety", "reward_to_go": 0.5},
        {"node": "vitals", "reward_to_go": 0.0},
    ]


def test_a_failed_rollout_has_no_sequence_and_no_reward() -> None:
    failed = Rollout(prompt=[{"role": "user", "content": "play"}], reward=math.nan)
    failed.fail("BackendError", "BackendError: down")
    rollout = ScoredRollout.from_rollout(failed, RolloutCredit(0.0))
    assert rollout.sequence is None and math.isnan(rollout.reward) and rollout.reply_advantages is None
    assert not rollout.healthy and rollout.error_cause == "BackendError"
    assert (rollout.stop_reason, rollout.advantage) == ("error", 0.0)


def test_an_unscored_rollout_or_a_state_without_an_advantage_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a reward and a stop reason"):
        ScoredRollout.from_rollout(Rollout(prompt="p", stop_reason="completed"), RolloutCredit(0.0))
    with pytest.raises(ValueError, match="needs a reward and a stop reason"):
        ScoredRollout.from_rollout(Rollout(prompt="p", reward=1.0), RolloutCredit(0.0))
    state = finished()
    del state["advantage"]
    with pytest.raises(ValueError, match="field 'advantage' is missing"):
        ScoredRollout.from_dict(state)
