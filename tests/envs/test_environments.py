"""Local backend, single- and multi-turn environments (their stop reasons), token-in/token-out, the
progressive-reveal env."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

import torch
from transformers import AutoTokenizer

from envs.backends import LocalBackend, SamplingParams
from envs.chat import TemplatePrefixError, chat_ids, next_turn_ids, render
from envs.environment import MultiTurnEnv, SingleTurnEnv
from envs.multistep_env import MultiStepMultiTurnEnv
from envs.sequence import TrajectoryError, build_sequence
from rubrics import Rubric
from rubrics.advantages import assign_advantages
from rubrics.judges.base import JudgeError
from rubrics.multistep import BinaryRequirement, MultiStepRubric, RuleJudge, Scenario
from rubrics.types import EvaluationResult, StopReason, plain_state
from tests.support.scripted_backend import FlakyBackend, ScriptedBackend

QUESTION = [{"role": "user", "content": "What is 7 times 8?"}]


@pytest.fixture(scope="module")
def local(tiny_model_dir: Path) -> LocalBackend:
    return LocalBackend.from_pretrained(str(tiny_model_dir))


# -- local backend -----------------------------------------------------------------------------------


async def test_local_logprobs_equal_a_teacher_forced_forward_pass(local: LocalBackend) -> None:
    prompts = [
        chat_ids(local.tokenizer, QUESTION),
        chat_ids(local.tokenizer, [{"role": "user", "content": "Hi"}]),
    ]
    params = SamplingParams(n=3, temperature=0.7, max_tokens=12, seed=3)
    groups = await asyncio.gather(*(local.generate(p, params) for p in prompts))  # one batch, left-padded
    for prompt, samples in zip(prompts, groups, strict=True):
        assert len(samples) == 3
        for s in samples:
            assert len(s.completion_ids) == len(s.logprobs) >= 1
            ids = torch.tensor([prompt + s.completion_ids])
            with torch.no_grad():
                logits = local.model(ids).logits[0, len(prompt) - 1 : -1].float()
            expected = (
                torch.log_softmax(logits / 0.7, dim=-1).gather(1, ids[0, len(prompt) :, None]).squeeze(1)
            )
            assert torch.allclose(torch.tensor(s.logprobs), expected, atol=1e-4)
            if s.finish_reason == "stop":
                assert s.completion_ids[-1] in local.eos_token_ids
            else:
                assert len(s.completion_ids) == 12


async def test_shared_prefill_runs_once_per_distinct_prompt_and_changes_nothing(
    local: LocalBackend, monkeypatch
) -> None:
    prompts = [
        chat_ids(local.tokenizer, QUESTION),
        chat_ids(local.tokenizer, [{"role": "user", "content": "Hi"}]),
    ]
    params = SamplingParams(n=3, temperature=0.0, max_tokens=10)
    prefilled: list[int] = []
    original = local._shared_prefill

    def spy(rows: Any, input_ids: Any, attention_mask: Any) -> Any:
        cache = original(rows, input_ids, attention_mask)
        prefilled.append(0 if cache is None else len(rows))
        return cache

    monkeypatch.setattr(local, "_shared_prefill", spy)
    shared = await asyncio.gather(*(local.generate(p, params) for p in prompts))
    local.share_prefill = False
    try:
        plain = await asyncio.gather(*(local.generate(p, params) for p in prompts))
    finally:
        local.share_prefill = True
    assert prefilled == [6]  # one batch of 6 rows from 2 distinct prompts went through the shared cache
    for a, b in zip(itertools.chain(*shared), itertools.chain(*plain), strict=True):
        assert a.completion_ids == b.completion_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    unique = [await local.generate(p, SamplingParams(n=1, temperature=0.0, max_tokens=4)) for p in prompts]
    assert prefilled[1:] == [0, 0] and all(len(u) == 1 for u in unique)  # nothing shared: plain prefill


async def test_generation_computes_logits_of_the_last_position_only(local: LocalBackend) -> None:
    """No forward of a generation (the shared prefill included) builds logits for a whole prompt: for long
    multi-turn prompts such a [rows, width, vocab] block took gigabytes (the main job peaked at 9.6 GiB)."""
    head = local.model.get_output_embeddings()
    positions: list[int] = []
    hook = head.register_forward_hook(lambda module, args, out: positions.append(out.shape[1]))
    prompts = [
        chat_ids(local.tokenizer, QUESTION),
        chat_ids(local.tokenizer, [{"role": "user", "content": "Hi"}]),
    ]
    try:
        await asyncio.gather(*(local.generate(p, SamplingParams(n=3, max_tokens=4)) for p in prompts))
    finally:
        hook.remove()
    assert positions and max(positions) == 1


async def test_local_greedy_is_deterministic_and_batches_concurrent_calls(
    local: LocalBackend, monkeypatch
) -> None:
    prompt = chat_ids(local.tokenizer, QUESTION)
    calls = []
    original = local._generate_batch
    monkeypatch.setattr(local, "_generate_batch", lambda batch: calls.append(len(batch)) or original(batch))
    greedy = SamplingParams(n=2, temperature=0.0, max_tokens=8)
    a, b = await asyncio.gather(local.generate(prompt, greedy), local.generate(prompt, greedy))
    assert calls == [2]  # two requests, one generate call
    assert a[0].completion_ids == a[1].completion_ids == b[0].completion_ids


# -- environments ------------------------------------------------------------------------------------


def length_reward(completion, **kwargs) -> float:
    return float(len(completion[-1]["content"]))


async def test_single_turn_env_records_the_trajectory(local: LocalBackend) -> None:
    env = SingleTurnEnv(
        [{"prompt": "What is 7 times 8?", "answer": "56"}],
        Rubric(funcs=[length_reward]),
        local.tokenizer,
        system_prompt="Be brief.",
        sampling=SamplingParams(temperature=1.0, max_tokens=10),
    )
    states = await env.run_group(env.dataset[0], local, n=4)
    prompt_ids = chat_ids(local.tokenizer, [{"role": "system", "content": "Be brief."}, *QUESTION])
    for s in states:
        (step,) = s["trajectory"]
        assert step["prompt_ids"] == prompt_ids
        assert len(step["completion_ids"]) == len(step["completion_logprobs"]) <= 10
        assert s["reward"] == float(len(s["completion"][0]["content"]))
        assert s["timing"]["generation_ms"] > 0 and s["timing"]["scoring_ms"] >= 0
    assert all("advantage" not in s for s in states)  # advantages are the caller's (assign_advantages)


class EchoEnv(MultiTurnEnv):
    async def env_response(self, messages, state) -> list[dict[str, Any]]:
        return [{"role": "user", "content": f"Turn {state['turn']} done. Go on."}]


async def test_multi_turn_ids_are_the_served_ids_and_render_as_the_conversation(local: LocalBackend) -> None:
    env = EchoEnv(
        [{"prompt": QUESTION}],
        Rubric(funcs=[length_reward]),
        local.tokenizer,
        sampling=SamplingParams(temperature=1.0, max_tokens=6),
        max_turns=3,
    )
    (state,) = await env.rollout_group(env.dataset[0], local, n=1)
    steps = state["trajectory"]
    assert len(steps) == 3 and state["stop_reason"] == "max_turns"
    for prev, nxt in itertools.pairwise(steps):
        # each turn's prompt extends the previous prompt and the model's exact ids (never re-tokenised)
        seen = prev["prompt_ids"] + prev["completion_ids"]
        assert nxt["prompt_ids"][: len(seen)] == seen
    roles = [m["role"] for m in state["completion"]]
    assert roles == ["assistant", "user", "assistant", "user", "assistant"]
    sequence = build_sequence(steps)  # model tokens masked in, environment tokens out
    assert sequence.ids == steps[-1]["prompt_ids"] + steps[-1]["completion_ids"]
    assert sequence.completion_tokens == sum(len(s["completion_ids"]) for s in steps)
    for s in steps:
        start = len(s["prompt_ids"])
        assert sequence.loss_mask[start - 1] == 0 and all(
            sequence.loss_mask[start : start + len(s["completion_ids"])]
        )
        assert sequence.logprobs[start : start + len(s["completion_ids"])] == s["completion_logprobs"]
    # where each reply is: right after its turn's prompt, as long as its completion
    assert sequence.replies == [
        (len(s["prompt_ids"]), len(s["prompt_ids"]) + len(s["completion_ids"])) for s in steps
    ]
    assert state["sequence"] == {
        "ids": sequence.ids,
        "loss_mask": sequence.loss_mask,
        "logprobs": sequence.logprobs,
        "replies": sequence.replies,
    }
    broken = [dict(steps[0]), {**steps[1], "prompt_ids": [7, *steps[1]["prompt_ids"][1:]]}]
    with pytest.raises(
        TrajectoryError, match="turn 1: prompt ids diverge from the earlier turns at position 0"
    ):
        build_sequence(broken)
    # the env ids are exactly the template's rendering of the new message
    last = steps[-1]
    text = local.tokenizer.decode(last["prompt_ids"], skip_special_tokens=False)
    messages = [*QUESTION, *state["completion"][:-1]]
    assert text.endswith(render(local.tokenizer, messages, True)[-40:])


def test_a_template_that_rewrites_history_is_reported(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    tokenizer.chat_template = (  # drops every assistant message but the last, like templates that strip <think>
        "{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}"
        "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    prompt_ids = chat_ids(tokenizer, QUESTION)
    reply = tokenizer("fifty six", add_special_tokens=False)["input_ids"] + [
        tokenizer.convert_tokens_to_ids("<|im_end|>")
    ]
    messages = [
        *QUESTION,
        {"role": "assistant", "content": "fifty six"},
        {"role": "user", "content": "Sure?"},
    ]
    with pytest.raises(TemplatePrefixError, match="does not extend the tokens the model saw"):
        next_turn_ids(tokenizer, prompt_ids, reply, messages)


# -- progressive reveal ------------------------------------------------------------------------------


def reveal_rubric() -> MultiStepRubric:
    reqs = [
        BinaryRequirement(
            name="safety",
            question="Safe?",
            dependencies={1.0: ["vitals"]},
            rules={1.0: {"any": ["scene is safe"]}, 0.0: {"any": ["not safe"]}},
        ),
        BinaryRequirement(
            name="vitals",
            question="Vitals?",
            dependencies={1.0: ["oxygen", "position"]},
            rules={1.0: {"any": ["check vitals"]}},
        ),
        BinaryRequirement(
            name="oxygen",
            question="Oxygen?",
            dependencies={1.0: ["transport"]},
            rules={1.0: {"any": ["give oxygen"]}},
        ),
        BinaryRequirement(name="position", question="Position?", rules={1.0: {"any": ["recovery position"]}}),
        BinaryRequirement(name="transport", question="Transport?", rules={1.0: {"any": ["transport"]}}),
    ]
    return MultiStepRubric(reqs, [RuleJudge()], reward_strategy={"type": "completion_ratio"})


SCENARIO = Scenario(
    prompt="A man collapsed in a park.",
    answers={n: {"answer": 1.0} for n in ("safety", "vitals", "oxygen", "position", "transport")},
    name="park",
    revealed_info={"safety": "You reach him. He is breathing.", "vitals": "Pulse 120, SpO2 88%."},
)


async def run_reveal(tokenizer: Any, replies: list[str], **kw) -> tuple[dict, ScriptedBackend]:
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
    results = state["multistep"].results
    assert [(r.name, r.turn, r.correct) for r in results] == [
        ("safety", 1, True),
        ("vitals", 2, True),
        ("oxygen", 3, True),
        ("position", 3, True),
        ("transport", 3, True),
    ]
    assert [m["role"] for m in state["completion"]] == ["assistant", "user", "assistant", "user", "assistant"]
    assert state["completion"][1]["content"] == "You reach him. He is breathing."
    assert state["completion"][3]["content"] == "Pulse 120, SpO2 88%."
    assert state["stop_reason"] == "terminal" and state["reward"] == 1.0
    assert state["metrics"]["req/transport"] == 1.0 and state["metrics"]["depth"] == 4.0
    # the walk is gone, the verdicts are typed and write out as plain data, judging time is counted
    assert isinstance(state["multistep"], EvaluationResult) and type(state["stop_reason"]) is str
    assert json.loads(json.dumps(plain_state(state)))["multistep"]["stop_reason"] == "terminal"
    assert "progress" not in state and state["timing"]["judge_ms"] >= 0.0


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
    assert state["reply_nodes"] == ["safety", "vitals", "oxygen+position"]
    # completion_ratio over an ideal walk of 5: every verdict from reply k on. Reply 1: 5/5 (the reward);
    # reply 2: vitals, oxygen, position, transport = 4/5; reply 3: oxygen, position, transport = 3/5
    credits = env.reply_credit(state)
    assert [(c.node, c.reward_to_go) for c in credits] == [
        ("safety", 1.0),
        ("vitals", 0.8),
        ("oxygen+position", 0.6),
    ]
    assert credits[0].reward_to_go == state["reward"] and env.credits_replies
    assert len(state["sequence"]["replies"]) == len(credits)
    # a reward that is not the rubric's own has no per-reply verdicts to credit
    other = MultiStepMultiTurnEnv(
        reveal_rubric(), [SCENARIO], tokenizer, rubric=Rubric(funcs=[length_reward])
    )
    assert not other.credits_replies


async def test_incorrect_reply_closes_the_branch_and_nothing_is_judged_twice(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    state, backend = await run_reveal(tokenizer, ["It is not safe here."])
    assert len(backend.prompts) == 1 and state["stop_reason"] == "incorrect"
    assert [r.name for r in state["multistep"].results] == ["safety"]
    assert state["reward"] == 0.0


async def test_missing_ground_truth_ends_the_rollout_with_its_reason(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    answers = {n: {"answer": 1.0} for n in ("safety", "vitals")}
    scenario = Scenario(prompt=SCENARIO.prompt, answers=answers, revealed_info={"safety": "Breathing."})
    env = MultiStepMultiTurnEnv(
        reveal_rubric(), [scenario], tokenizer, sampling=SamplingParams(max_tokens=40)
    )
    backend = ScriptedBackend(tokenizer, ["The scene is safe.", "I check vitals."])
    (state,) = await env.run_group(env.dataset[0], backend, n=1)
    assert state["stop_reason"] == "missing_ground_truth" == state["multistep"].stop_reason
    assert [r.name for r in state["multistep"].results] == ["safety", "vitals"]
    assert state["metrics"]["stop/missing_ground_truth"] == 1.0 and len(backend.prompts) == 2


async def test_max_turns_and_token_budget_stop_the_rollout(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    state, backend = await run_reveal(tokenizer, ["The scene is safe.", "Hmm."], max_turns=1)
    assert state["stop_reason"] == "max_turns" and len(backend.prompts) == 1
    assert state["reward"] == pytest.approx(1 / 5)  # completion ratio: 1 of the 5 on the path
    env = MultiStepMultiTurnEnv(reveal_rubric(), [SCENARIO], tokenizer)
    prompt_len = len(chat_ids(tokenizer, env.initial_messages(env.dataset[0])))
    reply_len = len(tokenizer("The scene is safe.", add_special_tokens=False)["input_ids"]) + 1
    # room for the first reply, not for the reveal that would follow it
    state, backend = await run_reveal(
        tokenizer, ["The scene is safe.", "Hmm."], max_total_tokens=prompt_len + reply_len + 3
    )
    assert state["stop_reason"] == "token_budget" and len(backend.prompts) == 1
    assert state["completion"][-1]["role"] == "assistant"  # never ends on an unanswered message
    assert state["multistep"].stop_reason == "token_budget"  # the environment's reason, in the verdicts


async def test_a_prompt_over_the_budget_is_an_error_and_runs_no_walk(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    env = MultiStepMultiTurnEnv(reveal_rubric(), [SCENARIO], tokenizer, max_total_tokens=8)
    (state,) = await env.rollout_group(env.dataset[0], ScriptedBackend(tokenizer, ["x"]), n=1)
    assert "exceeds the token budget 8" in state["error"] and state["error_cause"] == "prompt_too_long"
    assert state["stop_reason"] == "error" and "multistep" not in state and state["trajectory"] == []
    assert "progress" not in state


def test_the_stratum_of_a_scenario_is_the_ground_truth_of_the_rubric_s_roots() -> None:
    unsafe = Scenario(prompt="A woman fell.", answers={"safety": {"answer": 0}}, name="fall")  # 0 reads 0.0
    env = MultiStepMultiTurnEnv(reveal_rubric(), [SCENARIO, unsafe], tokenizer=None)
    assert [env.stratum(e) for e in env.dataset] == ["safety=1.0", "safety=0.0"]
    # two roots: both, in the rubric's order; a root the scenario does not answer is None
    consent = BinaryRequirement(name="consent", question="Consent?", rules={1.0: {"any": ["agrees"]}})
    two = MultiStepRubric([*reveal_rubric().requirements, consent], [RuleJudge()])
    assert two.roots == ["safety", "consent"]
    agrees = Scenario(prompt="He nods.", answers={"safety": 1.0, "consent": 1.0}, name="nod")
    env = MultiStepMultiTurnEnv(two, [agrees, unsafe], tokenizer=None)
    assert [env.stratum(e) for e in env.dataset] == ["safety=1.0,consent=1.0", "safety=0.0,consent=None"]
    plain = SingleTurnEnv([{"prompt": "2+2?", "answer": "4"}], Rubric(funcs=[]), tokenizer=None)
    assert plain.stratum(plain.dataset[0]) is None  # the default: no strata


class StoppingEnv(MultiTurnEnv):
    """Stops on a reply that says "stop" (with the reason the reply names, if any)."""

    async def is_completed(self, messages, state) -> bool | StopReason:
        text = messages[-1]["content"]
        if "terminal" in text:
            return StopReason.TERMINAL
        if "custom" in text:
            state["stop_reason"] = "custom"
        return "stop" in text

    async def env_response(self, messages, state) -> list[dict[str, Any]]:
        return [] if "silence" in messages[-1]["content"] else [{"role": "user", "content": "Go on."}]


@pytest.mark.parametrize(
    ("replies", "stop", "turns"),
    [
        (["go", "stop"], "completed", 2),  # True: completed
        (["stop custom"], "custom", 1),  # True keeps the reason the subclass set
        (["go", "terminal"], "terminal", 2),  # a StopReason is recorded as its plain value
        (["silence"], "completed", 1),  # env_response had nothing to say
        (["go", "go", "go"], "max_turns", 3),
    ],
)
async def test_multi_turn_stop_reasons(
    tiny_model_dir: Path, replies: list[str], stop: str, turns: int
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    env = StoppingEnv([{"prompt": QUESTION}], Rubric(funcs=[length_reward]), tokenizer, max_turns=3)
    (state,) = await env.rollout_group(env.dataset[0], ScriptedBackend(tokenizer, replies), n=1)
    assert state["stop_reason"] == stop and type(state["stop_reason"]) is str and state["turn"] == turns


# -- failures stay with their rollout ----------------------------------------------------------------------


class FlakyJudge(RuleJudge):
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
    states = await env.run_group(env.dataset[0], backend, n=4)  # each rollout stops after its first reply
    assign_advantages([states])
    causes = [s.get("error_cause") for s in states]
    assert causes == [None, "JudgeError", None, "BackendError"]
    for s in states[1::2]:  # failed: out of scoring, of the baseline and of the loss
        assert s["stop_reason"] == "error" and math.isnan(s["reward"]) and s["advantage"] == 0.0
        assert "sequence" not in s and s["error"].startswith(s["error_cause"])
    healthy = [s for s in states if not s.get("error")]
    assert [s["multistep"].results[0].correct for s in healthy] == [True, False]
    assert healthy[0]["advantage"] > 0  # the baseline is the mean of the two healthy rollouts
    assert healthy[0]["advantage"] == pytest.approx(-healthy[1]["advantage"])


async def test_a_group_sampled_in_one_request_fails_together(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    env = SingleTurnEnv([{"prompt": "Hi"}], Rubric(funcs=[length_reward]), tokenizer)
    states = await env.run_group(env.dataset[0], FlakyBackend(tokenizer, ["x"], fail_every=1), n=3)
    assign_advantages([states])
    assert [s["error_cause"] for s in states] == ["BackendError"] * 3
    assert all(math.isnan(s["reward"]) and s["advantage"] == 0.0 for s in states)
