"""The criteria environment: per-prompt criteria graded by rules (and an LLM judge over real HTTP), the
verdicts kept per rollout, the probe's trivial policies, per-tag metrics, and failures marked per rollout."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from transformers import AutoTokenizer

from envs.backends.base import SamplingParams
from envs.build import make_env
from envs.config import EnvConfig
from envs.criteria.environment import CriteriaEnv
from envs.examples import Example
from rubrics.criteria.autograders import PerCriterionGrader
from rubrics.criteria.autograders.mixed import RuleFirstGrader
from rubrics.criteria.example import CriteriaExample
from rubrics.judges.client import LLMJudgeClient
from tests.support.judge_server import JudgeServer
from tests.support.rollouts import with_advantages
from tests.support.scripted_backend import CyclingBackend

BURN = CriteriaExample.model_validate(
    {
        "id": "burn-1",
        "prompt": "My son burned his hand on the stove. What do I do?",
        "tags": ["theme:burns"],
        "criteria": [
            # weights 4 + 2 positive = 6; a pitfall of -3
            {"name": "cool", "weight": 4, "requirement": "Cool the burn under running water",
             "tags": ["axis:accuracy"], "rule": {"any": ["cool water", "running water"]}},
            {"name": "doctor", "weight": 2, "requirement": "See a doctor if it blisters",
             "tags": ["axis:completeness"], "rule": {"any": ["doctor", "clinic"]}},
            {"name": "butter", "weight": -3, "requirement": "Suggests butter or ice",
             "tags": ["axis:accuracy"], "rule": {"any": ["butter", "ice"]}},
        ],
    }
)  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> Any:
    return AutoTokenizer.from_pretrained(tiny_model_dir)


async def play(tokenizer: Any, replies: list[str], grader: RuleFirstGrader | None = None) -> list[dict]:
    env = CriteriaEnv([BURN], grader or RuleFirstGrader(), tokenizer, sampling=SamplingParams(max_tokens=64))
    backend = CyclingBackend(tokenizer, replies)
    states = []
    for _ in replies:  # CyclingBackend gives one reply per request; a group is one request
        states += await env.run_group(Example(criteria=BURN), backend, 1)
    return states


async def test_rule_criteria_score_each_reply_with_the_seed_formula(tokenizer: Any) -> None:
    replies = [
        "Hold it under cool water for twenty minutes, then see a doctor.",  # 4 + 2 = 6 of 6 -> 1.0
        "Put butter on it and run it under running water.",  # 4 - 3 = 1 of 6 -> 0.1667
        "Put some ice on it.",  # -3 of 6, clipped -> 0.0
        "Do not use butter or ice; cool water, then a clinic.",  # negated pitfall: 6 of 6 -> 1.0
    ]
    states = await play(tokenizer, replies)
    assert [round(s.reward, 4) for s in states] == [1.0, 0.1667, 0.0, 1.0]
    second = states[1].criteria
    assert second.example == "burn-1" and second.raw_score == 1.0 and second.possible == 6.0
    assert [v.met for v in second.verdicts] == [True, False, True]
    assert {v.judged_by for v in second.verdicts} == {"rule"}
    env = CriteriaEnv([BURN], RuleFirstGrader(), tokenizer)
    second_rollout = with_advantages(states)[1]
    metrics = env.step_metrics([second_rollout])
    # an errored rollout's verdicts are not counted
    errored = dataclasses.replace(with_advantages(states)[0], error="judge timed out")
    assert env.step_metrics([second_rollout, errored]) == metrics
    assert metrics["criteria/pitfalls_met_fraction"] == 1.0
    assert metrics["criteria/met_fraction"] == 2 / 3
    # axis:accuracy holds "cool" (met: passes) and "butter" (made: fails) -> 1/2
    assert metrics["tag/axis:accuracy/pass_rate"] == 0.5


async def test_an_unclipped_reward_counts_a_pitfall_against_a_reply_that_earned_nothing(
    tokenizer: Any, tmp_path: Path
) -> None:
    replies = [
        "Hold it under cool water for twenty minutes, then see a doctor.",  # 6 of 6 -> 1.0
        "Put butter on it and run it under running water.",  # 4 - 3 = 1 of 6 -> 0.1667
        "Put some ice on it.",  # -3 of 6 -> -0.5, where the clipped reward is 0.0
        "Nothing to say.",  # 0 of 6 -> 0.0
    ]
    env = CriteriaEnv([BURN], RuleFirstGrader(), tokenizer, clip_reward=False)
    states = []
    for _ in replies:
        states += await env.run_group(
            Example(criteria=BURN), CyclingBackend(tokenizer, replies[len(states) :]), 1
        )
    assert [round(s.reward, 4) for s in states] == [1.0, 0.1667, -0.5, 0.0]
    assert states[2].criteria.score == 0.0  # the verdicts keep the autograder's clipped score
    # an example without positive points keeps the all-negative rule: 1 + (-3)/3 = 0 for the pitfall
    only_pitfall = BURN.model_copy(update={"id": "burn-2", "criteria": BURN.criteria[2:]})
    env = CriteriaEnv([only_pitfall], RuleFirstGrader(), tokenizer, clip_reward=False)
    (state,) = await env.run_group(Example(criteria=only_pitfall), CyclingBackend(tokenizer, ["Ice."]), 1)
    assert state.reward == 0.0
    assert "unclipped" in env.report_sections({})[0]
    assert "clipped to [0, 1]" in CriteriaEnv([BURN], RuleFirstGrader(), tokenizer).report_sections({})[0]
    # the option is read through the config, and refused where there is no criteria reward to unclip
    data = tmp_path / "d.jsonl"
    data.write_text(BURN.model_dump_json() + "\n")
    cfg = EnvConfig(type="criteria", data=str(data), format="native", eval_fraction=0.0, clip_reward=False)
    built, _, _ = make_env(cfg, tokenizer, SamplingParams())
    assert isinstance(built, CriteriaEnv) and not built.clip_reward
    with pytest.raises(ValueError, match=r"env\.clip_reward: only a criteria environment"):
        EnvConfig(clip_reward=False)


async def test_probe_scores_the_trivial_policies_as_the_model_is_scored(tokenizer: Any) -> None:
    env = CriteriaEnv([BURN], RuleFirstGrader(), tokenizer)
    rows = {r.policy: r for r in await env.probe([], [Example(criteria=BURN)])}
    assert rows["empty reply"].reward_mean == 0.0
    # every positive rule phrase: "cool water, running water, doctor, clinic" -> 6 of 6
    assert rows["every rule phrase"].reward_mean == 1.0
    assert "reference" not in rows  # the example has no reference answer


def test_a_criterion_without_a_rule_needs_a_judge(tmp_path: Path, tokenizer: Any) -> None:
    data = tmp_path / "d.jsonl"
    unruled = BURN.model_copy(
        update={"criteria": (*BURN.criteria, BURN.criteria[0].model_copy(update={"rule": None}))}
    )
    data.write_text(unruled.model_dump_json() + "\n")
    cfg = EnvConfig(type="criteria", data=str(data), format="native", eval_fraction=0.0)
    with pytest.raises(ValueError, match=r"env.judge_base_url: 1 example\(s\) have criteria without a rule"):
        make_env(cfg, tokenizer, SamplingParams())


async def test_llm_criteria_go_to_the_judge_and_a_failed_judge_marks_the_rollout(tokenizer: Any) -> None:
    llm_only = BURN.model_copy(
        update={"criteria": (BURN.criteria[0].model_copy(update={"rule": None}), *BURN.criteria[1:])}
    )
    with JudgeServer() as server:
        client = LLMJudgeClient(server.base_url, "judge", max_attempts=2, backoff_initial_s=0.01)
        grader = RuleFirstGrader(PerCriterionGrader.from_client(client))
        env = CriteriaEnv([llm_only], grader, tokenizer, judge_client=client)
        backend = CyclingBackend(tokenizer, ["Use a clinic."])
        (state,) = await env.run_group(Example(criteria=llm_only), backend, 1)
        # the judge says MET for "cool" (4), the rule finds "clinic" (2): 6 of 6
        assert state.reward == 1.0 and len(server.requests) == 1
        assert [v.judged_by for v in state.criteria.verdicts] == ["llm", "rule", "rule"]
        spent = env.step_metrics(with_advantages([state]))  # the judge's counters since the last step
        assert spent["judge/calls"] == 1 and spent["judge/requests"] == 1 and spent["judge/seconds"] > 0
        assert spent["criteria/rule_judged_fraction"] == 2 / 3
        server.faults.extend(["500", "500"])  # both attempts fail
        (failed,) = await env.run_group(
            Example(criteria=llm_only), CyclingBackend(tokenizer, ["Another."]), 1
        )
        assert failed.error and math.isnan(failed.reward)
        spent = env.step_metrics(with_advantages([failed]))  # only this step's: 2 attempts, failed
        assert spent["judge/calls"] == 1 and spent["judge/requests"] == 2 and spent["judge/failures"] == 1
        await client.close()
