"""The progressive-reveal environment on the tiny model: reveals wait for the next reply, each reply's credit,
closed branches, missing ground truth, stop reasons and budgets, strata; failures stay with their rollout."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from transformers import AutoTokenizer

from envs.backends import SamplingParams
from envs.chat import chat_ids
from envs.environment import SingleTurnEnv
from envs.multistep_env import MultiStepMultiTurnEnv
from rubrics import Rubric
from rubrics.judges.base import JudgeError
from rubrics.multistep import BinaryRequirement, MultiStepRubric, RuleRequirementJudge, Scenario
from rubrics.types import EvaluationResult, Rollout, plain_state
from tests.support.rollouts import with_advantages
from tests.support.scripted_backend import FlakyBackend, ScriptedBackend

from .helpers import SCENARIO, length_reward, reveal_rubric

# -- progressive reveal ------------------------------------------------------------------------------


async def run_reveal(tokenizer: Any, replies: list[str], **kw) -> tuple[Rollout, ScriptedBackend]:
    env = MultiStepMultiTurnEnv(
        reveal_rubric(), [SCENARIO], tokenizer, sampling=SamplingParams(max_tokens=40), **kw
    )
    backend = ScriptedBackend(tokenizer, replies)
    (state,) = await env.run_group(env.dataset[0], backend, n=1)
    return state, backend


async def test_reveals_wait_for_the_next_reply_and_plain_steps_are_judged_at_once(
    tiny_model_dir: Path,
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    state, _ = await run_reveal(
        tokenizer,
        [
            "The scene is safe, I check vitals and give oxygen.",  # safety (reveal) -> vitals waits
            "I check vitals, give oxygen, recovery position, transport.",  # vitals (reveal) -> oxygen, position wait
            "I give oxygen and use the recovery position, then transport.",  # oxygen -> transport at once
        ],
    )
    results = state.multistep.results
    assert [(r.name, r.turn, r.correct) for r in results] == [
        ("safety", 1, True),
        ("vitals", 2, True),
        ("oxygen", 3, True),
        ("position", 3, True),
        ("transport", 3, True),
    ]
    assert [m["role"] for m in state.completion] == ["assistant", "user", "assistant", "user", "assistant"]
    assert state.completion[1]["content"] == "You reach him. He is breathing."
    assert state.completion[3]["content"] == "Pulse 120, SpO2 88%."
    assert state.stop_reason == "terminal" and state.reward == 1.0
    assert state.metrics["req/transport"] == 1.0 and state.metrics["depth"] == 4.0
    # the walk is gone, the verdicts are typed and write out as plain data, judging time is counted
    assert isinstance(state.multistep, EvaluationResult) and type(state.stop_reason) is str
    assert json.loads(json.dumps(plain_state(state.to_state())))["multistep"]["stop_reason"] == "terminal"
    assert state.timing["judge_ms"] >= 0.0


async def test_each_reply_is_credited_with_its_node_and_reward_to_go(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    replies = [
        "The scene is safe, I check vitals and give oxygen.",
        "I check vitals, give oxygen, recovery position, transport.",
        "I give oxygen and use the recovery position, then transport.",
    ]
    env = MultiStepMultiTurnEnv(
        reveal_rubric(), [SCENARIO], tokenizer, sampling=SamplingParams(max_tokens=40)
    )
    (state,) = await env.run_group(env.dataset[0], ScriptedBackend(tokenizer, replies), n=1)
    # the node of each reply is what the walk waited on: the root, then vitals, then both children of vitals
    assert state.reply_nodes == ["safety", "vitals", "oxygen+position"]
    # completion_ratio over an ideal walk of 5: every verdict from reply k on. Reply 1: 5/5 (the reward);
    # reply 2: vitals, oxygen, position, transport = 4/5; reply 3: oxygen, position, transport = 3/5
    credits = env.reply_credit(env.dataset[0], state)
    assert [(c.node, c.reward_to_go) for c in credits] == [
        ("safety", 1.0),
        ("vitals", 0.8),
        ("oxygen+position", 0.6),
    ]
    assert credits[0].reward_to_go == state.reward and env.credits_replies
    assert len(state.sequence.replies) == len(credits)
    # a reward that is not the rubric's own has no per-reply verdicts to credit
    other = MultiStepMultiTurnEnv(
        reveal_rubric(), [SCENARIO], tokenizer, rubric=Rubric(funcs=[length_reward])
    )
    assert not other.credits_replies


async def test_incorrect_reply_closes_the_branch_and_nothing_is_judged_twice(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    state, backend = await run_reveal(tokenizer, ["It is not safe here."])
    assert len(backend.prompts) == 1 and state.stop_reason == "incorrect"
    assert [r.name for r in state.multistep.results] == ["safety"]
    assert state.reward == 0.0


async def test_missing_ground_truth_ends_the_rollout_with_its_reason(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    answers = {n: {"answer": 1.0} for n in ("safety", "vitals")}
    scenario = Scenario(prompt=SCENARIO.prompt, answers=answers, revealed_info={"safety": "Breathing."})
    env = MultiStepMultiTurnEnv(
        reveal_rubric(), [scenario], tokenizer, sampling=SamplingParams(max_tokens=40)
    )
    backend = ScriptedBackend(tokenizer, ["The scene is safe.", "I check vitals."])
    (state,) = await env.run_group(env.dataset[0], backend, n=1)
    assert state.stop_reason == "missing_ground_truth" == state.multistep.stop_reason
    assert [r.name for r in state.multistep.results] == ["safety", "vitals"]
    assert state.metrics["stop/missing_ground_truth"] == 1.0 and len(backend.prompts) == 2


async def test_max_turns_and_token_budget_stop_the_rollout(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    state, backend = await run_reveal(tokenizer, ["The scene is safe.", "Hmm."], max_turns=1)
    assert state.stop_reason == "max_turns" and len(backend.prompts) == 1
    assert state.reward == pytest.approx(1 / 5)  # completion ratio: 1 of the 5 on the path
    env = MultiStepMultiTurnEnv(reveal_rubric(), [SCENARIO], tokenizer)
    prompt_len = len(chat_ids(tokenizer, env.initial_messages(env.dataset[0])))
    reply_len = len(tokenizer("The scene is safe.", add_special_tokens=False)["input_ids"]) + 1
    # room for the first reply, not for the reveal that would follow it
    state, backend = await run_reveal(
        tokenizer, ["The scene is safe.", "Hmm."], max_total_tokens=prompt_len + reply_len + 3
    )
    assert state.stop_reason == "token_budget" and len(backend.prompts) == 1
    assert state.completion[-1]["role"] == "assistant"  # never ends on an unanswered message
    assert state.multistep.stop_reason == "token_budget"  # the environment's reason, in the verdicts


async def test_a_prompt_over_the_budget_is_an_error_and_runs_no_walk(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    env = MultiStepMultiTurnEnv(reveal_rubric(), [SCENARIO], tokenizer, max_total_tokens=8)
    (state,) = await env.rollout_group(env.dataset[0], ScriptedBackend(tokenizer, ["x"]), n=1)
    assert "exceeds the token budget 8" in state.error and state.error_cause == "prompt_too_long"
    assert state.stop_reason == "error" and state.multistep is None and state.trajectory == []


def test_the_stratum_of_a_scenario_is_the_ground_truth_of_the_rubric_s_roots() -> None:
    unsafe = Scenario(prompt="A woman fell.", answers={"safety": {"answer": 0}}, name="fall")  # 0 reads 0.0
    env = MultiStepMultiTurnEnv(reveal_rubric(), [SCENARIO, unsafe], tokenizer=None)
    assert [env.stratum(e) for e in env.dataset] == ["safety=1.0", "safety=0.0"]
    # two roots: both, in the rubric's order; a root the scenario does not answer is None
    consent = BinaryRequirement(name="consent", question="Consent?", rules={1.0: {"any": ["agrees"]}})
    two = MultiStepRubric([*reveal_rubric().requirements, consent], [RuleRequirementJudge()])
    assert two.roots == ["safety", "consent"]
    agrees = Scenario(prompt="He nods.", answers={"safety": 1.0, "consent": 1.0}, name="nod")
    env = MultiStepMultiTurnEnv(two, [agrees, unsafe], tokenizer=None)
    assert [env.stratum(e) for e in env.dataset] == ["safety=1.0,consent=1.0", "safety=0.0,consent=None"]
    plain = SingleTurnEnv([{"prompt": "2+2?", "answer": "4"}], Rubric(funcs=[]), tokenizer=None)
    assert plain.stratum(plain.dataset[0]) is None  # the default: no strata


# -- failures stay with their rollout ----------------------------------------------------------------------


class FlakyJudge(RuleRequirementJudge):
    """The rule judge, except that a reply saying "boom" gets no verdict (as an LLM judge after its retries)."""

    def judge_for(self, requirement):
        rules = super().judge_for(requirement)

        async def flaky(prompt, completion, answer=None, state=None):
            if "boom" in str(completion):
                raise JudgeError(f"judge gave no verdict on {requirement.name!r} after 3 attempts")
            return await rules(prompt, completion, answer, state)

        flaky.name, flaky.response_format = rules.name, rules.response_format
        return flaky


async def test_a_failing_rollout_is_marked_and_the_group_goes_on(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    rubric = reveal_rubric()
    rubric.judges["rules"] = FlakyJudge()
    env = MultiStepMultiTurnEnv(rubric, [SCENARIO], tokenizer, sampling=SamplingParams(max_tokens=40))
    replies = ["The scene is safe.", "boom", "The scene is not safe.", "I wait."]  # call 4 fails anyway
    backend = FlakyBackend(tokenizer, replies, fail_every=4)
    states = with_advantages(await env.run_group(env.dataset[0], backend, n=4))  # each stops after 1 reply
    causes = [s.error_cause for s in states]
    assert causes == [None, "JudgeError", None, "BackendError"]
    for s in states[1::2]:  # failed: out of scoring, of the baseline and of the loss
        assert s.stop_reason == "error" and math.isnan(s.reward) and s.advantage == 0.0
        assert s.sequence is None and s.error.startswith(s.error_cause)
    healthy = [s for s in states if not s.error]
    assert [s.multistep.results[0].correct for s in healthy] == [True, False]
    assert healthy[0].advantage > 0  # the baseline is the mean of the two healthy rollouts
    assert healthy[0].advantage == pytest.approx(-healthy[1].advantage)


async def test_a_group_sampled_in_one_request_fails_together(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    env = SingleTurnEnv([{"prompt": "Hi"}], Rubric(funcs=[length_reward]), tokenizer)
    states = with_advantages(
        await env.run_group(env.dataset[0], FlakyBackend(tokenizer, ["x"], fail_every=1), n=3)
    )
    assert [s.error_cause for s in states] == ["BackendError"] * 3
    assert all(math.isnan(s.reward) and s.advantage == 0.0 for s in states)
