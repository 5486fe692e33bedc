"""``ScoredRollout``: built once from a finished ``Rollout`` and its credit, written as ``rollouts.jsonl``
always held it (its keys in the order an environment wrote them into a state), and read back as the same
rollout. Real environments, scripted replies: a multi-step walk, failed rollouts, criteria verdicts, a reward
function that raises, a prompt over the budget."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from transformers import AutoTokenizer

from envs.backends.base import SamplingParams
from envs.criteria.environment import CriteriaEnv
from envs.environment import Environment, SingleTurnEnv
from envs.examples import Example
from envs.multistep_env import MultiStepMultiTurnEnv
from envs.rollout import ScoredRollout, rewards_and_errors, scored_groups
from rubrics.advantages import episode_credit
from rubrics.criteria.autograders.mixed import RuleFirstGrader
from rubrics.rubric import Rubric
from rubrics.types import Rollout
from tests.envs.criteria.test_environment import BURN
from tests.envs.helpers import QUESTION, SCENARIO, length_reward, reveal_rubric
from tests.support.scripted_backend import CyclingBackend, FlakyBackend, ScriptedBackend


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> Any:
    return AutoTokenizer.from_pretrained(tiny_model_dir)


async def _scored(env: Environment, backend: Any, n: int = 2) -> list[Rollout]:
    return await env.run_group(env.dataset[0], backend, n)


def _line(data: dict[str, Any]) -> str:
    return json.dumps(data, default=str)  # as envs.evaluation.run writes a line


START = ["prompt", "completion", "answer", "task", "info", "trajectory", "timing", "turn", "is_truncated"]
"""The keys every rollout starts with, in the order environments wrote them into a state."""


def _check(group: list[Rollout]) -> list[ScoredRollout]:
    """Every rollout's line holds its keys in the order ``rollouts.jsonl`` always had (what a rollout starts
    with, then the failure or the walk, verdicts and sequence, the score, the advantage), and reads back as
    the same rollout."""
    (scored,) = scored_groups([group], episode_credit(*rewards_and_errors([group])))
    for rollout in scored.rollouts:
        line = _line(rollout.to_dict())
        keys = list(json.loads(line))
        if rollout.error and rollout.error_cause != "reward_function":
            middle = ["error", "error_cause", "stop_reason"]
        else:
            middle = ["reply_nodes"] * (rollout.reply_nodes is not None) + ["stop_reason"]
            middle += [k for k in ("multistep", "sequence", "criteria") if getattr(rollout, k) is not None]
        end = ["reward", "metrics"] + (
            ["error", "error_cause"] if rollout.error_cause == "reward_function" else []
        )
        assert keys == [*START, *middle, *end, "advantage"]
        back = ScoredRollout.from_dict(json.loads(line))
        assert _line(back.to_dict()) == line
    return scored.rollouts


async def test_a_multistep_walk_writes_as_before(tokenizer: Any) -> None:
    env = MultiStepMultiTurnEnv(reveal_rubric(), [SCENARIO], tokenizer)
    backend = ScriptedBackend(tokenizer, ["The scene is safe.", "I check vitals.", "Give oxygen."])
    (rollout, _) = _check(await _scored(env, backend))
    assert rollout.multistep is not None and rollout.multistep.path[:2] == ["safety", "vitals"]
    assert rollout.reply_nodes is not None and rollout.reply_nodes[0] == "safety"
    assert rollout.for_probe().results == rollout.multistep.results and rollout.scenario == "park"


async def test_failed_rollouts_write_as_before(tokenizer: Any) -> None:
    env = MultiStepMultiTurnEnv(reveal_rubric(), [SCENARIO], tokenizer)
    backend = FlakyBackend(tokenizer, ["The scene is safe."], fail_every=2)
    rollouts = _check(await _scored(env, backend, n=4))
    failed = [r for r in rollouts if r.error]
    assert failed and all(r.error_cause == "BackendError" and r.sequence is None for r in failed)
    assert all(not r.healthy and r.advantage == 0.0 for r in failed)
    too_long = SingleTurnEnv(
        [{"prompt": QUESTION}], Rubric(funcs=[length_reward]), tokenizer, max_total_tokens=3
    )
    (rollout, _) = _check(await _scored(too_long, CyclingBackend(tokenizer, ["56"])))
    assert rollout.error_cause == "prompt_too_long" and rollout.stop_reason == "error"


async def test_criteria_verdicts_and_a_scoring_error_write_as_before(tokenizer: Any) -> None:
    env = CriteriaEnv([BURN], RuleFirstGrader(), tokenizer, sampling=SamplingParams(max_tokens=64))
    backend = CyclingBackend(tokenizer, ["Cool water, then a doctor.", "Put butter on it."])
    group = await env.run_group(Example(criteria=BURN), backend, 1)
    group += await env.run_group(Example(criteria=BURN), backend, 1)
    first, second = _check(group)
    assert first.criteria is not None and first.criteria.score == 1.0 and second.reward < 1.0

    def raises(completion: Any) -> float:
        raise RuntimeError("no score")

    broken = SingleTurnEnv([{"prompt": QUESTION}], Rubric(funcs=[raises]), tokenizer)
    (rollout, _) = _check(await _scored(broken, CyclingBackend(tokenizer, ["56"])))
    assert rollout.error_cause == "reward_function" and rollout.sequence is not None


def test_a_line_with_a_key_the_type_does_not_hold_is_refused() -> None:
    with pytest.raises(ValueError, match=r"field 'progress' is not one of a scored rollout"):
        ScoredRollout.from_dict({"progress": 1})
    with pytest.raises(ValueError, match=r"field 'prompt' is missing"):
        ScoredRollout.from_dict({"reward": 1.0})


def test_an_unscored_rollout_is_refused() -> None:
    with pytest.raises(ValueError, match="score the rollout first"):
        ScoredRollout.from_rollout(Rollout(prompt="hi"), episode_credit([[0.0]], [[False]])[0].rollouts_G[0])
