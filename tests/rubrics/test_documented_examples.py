"""Every worked example of the scoring API's specification, as printed: rubric groups, rubrics and the signatures
of reward functions."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest

from rubrics import MathRubric, Parser, Rubric, RubricGroup
from rubrics.types import Messages, RewardFunc, State


def create_state(i: int = 0) -> dict[str, Any]:
    return {
        "prompt": [{"role": "user", "content": f"question {i}"}],
        "completion": [{"role": "assistant", "content": "x" * (i + 1)}],
        "task": "default",
        "timing": {"generation_ms": 100, "total_ms": 100, "scoring_ms": 0},
        "trajectory": [],
        "turn": 0,
    }


# -- RubricGroup -----------------------------------------------------------------------------------


async def test_seed000_scoring_a_single_rollout() -> None:
    rubric1 = Rubric(funcs=[lambda completion, **kw: 1.0], weights=[1.0])
    rubric2 = Rubric(funcs=[lambda completion, **kw: 0.5], weights=[0.8])
    group = RubricGroup(rubrics=[rubric1, rubric2])
    state: State = {
        "prompt": [{"role": "user", "content": "What is 2+2?"}],
        "completion": [{"role": "assistant", "content": "4"}],
        "task": "math",
        "timing": {"generation_ms": 100, "total_ms": 100, "scoring_ms": 0},
        "trajectory": [],
        "turn": 0,
    }
    await group.score_rollout(state)
    assert state["reward"] == pytest.approx(1.4)  # 1.0 * 1.0 + 0.5 * 0.8
    # Both functions are lambdas: same-named metrics are summed (1.0 + 0.5).
    assert state["metrics"] == {"<lambda>": pytest.approx(1.5)}


async def test_seed000_aggregation_example() -> None:
    def func1(completion, **kwargs):
        return 2.0

    def func2(completion, **kwargs):
        return 3.0

    group = RubricGroup(rubrics=[Rubric(funcs=[func1], weights=[1.0]), Rubric(funcs=[func2], weights=[0.5])])
    state = create_state()
    await group.score_rollout(state)
    assert state["reward"] == 3.5  # 2.0 * 1.0 + 3.0 * 0.5
    assert state["metrics"] == {"func1": 2.0, "func2": 3.0}


async def test_seed000_scoring_multiple_rollouts() -> None:
    def reward_func1(completion, **kwargs):
        return 1.0

    def reward_func2(completion, **kwargs):
        return 0.5

    group = RubricGroup(
        rubrics=[Rubric(funcs=[reward_func1], weights=[1.0]), Rubric(funcs=[reward_func2], weights=[0.8])]
    )
    states = [create_state(i) for i in range(10)]
    await group.score_group(states)
    for state in states:
        assert state["reward"] == pytest.approx(1.4)
        assert state["metrics"] == {"reward_func1": 1.0, "reward_func2": 0.5}
        assert state["advantage"] == pytest.approx(0.0)


async def test_seed000_same_named_metrics_are_summed() -> None:
    def accuracy(completion, **kwargs):
        return 0.8

    def accuracy_b(completion, **kwargs):
        return 0.2

    accuracy_b.__name__ = "accuracy"
    group = RubricGroup(rubrics=[Rubric(funcs=[accuracy]), Rubric(funcs=[accuracy_b])])
    state = create_state()
    await group.score_rollout(state)
    assert state["metrics"] == {"accuracy": pytest.approx(1.0)}


def test_seed000_add_methods_go_to_first_rubric_with_warning(caplog: pytest.LogCaptureFixture) -> None:
    rubric1 = Rubric(funcs=[], weights=[])
    rubric2 = Rubric(funcs=[], weights=[])
    group = RubricGroup(rubrics=[rubric1, rubric2])

    def new_reward(completion, **kwargs):
        return 1.0 if "correct" in completion else 0.0

    def token_count(completion, **kwargs):
        return len(completion.split())

    with caplog.at_level("WARNING"):
        group.add_reward_func(new_reward, weight=0.5)
        group.add_metric(token_count, weight=0.0)
        group.add_class_object("helper", object())
    assert rubric1.funcs == [new_reward, token_count]
    assert rubric1.weights == [0.5, 0.0]
    assert "helper" in rubric1.class_objects
    assert rubric2.funcs == [] and "helper" not in rubric2.class_objects
    assert sum("first rubric only" in r.message for r in caplog.records) == 3
    assert group.funcs == [new_reward, token_count]
    assert group._get_reward_func_names() == ["new_reward", "token_count"]


def test_seed000_empty_rubric_list_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="at least one rubric"):
        RubricGroup(rubrics=[])


def test_seed000_group_is_a_rubric_and_combines_math_and_format() -> None:
    def check_json_format(completion, **kwargs):
        try:
            json.loads(completion)
            return 1.0
        except ValueError:
            return 0.0

    math_rubric = MathRubric(extract_answer=True, normalize=True)
    combined = RubricGroup(rubrics=[math_rubric, Rubric(funcs=[check_json_format], weights=[0.2])])
    assert isinstance(combined, Rubric)
    assert combined.weights == [1.0, 0.2]


# -- Rubric -------------------------------------------------------------------------------------------


def test_seed001_constructor_defaults() -> None:
    def f(completion, **kwargs):
        return 1.0

    rubric = Rubric(funcs=[f, f])
    assert rubric.weights == [1.0, 1.0]
    assert isinstance(rubric.parser, Parser)
    assert rubric.class_objects["parser"] is rubric.parser
    with pytest.raises(ValueError, match="2 reward functions but 1 weights"):
        Rubric(funcs=[f, f], weights=[1.0])


async def test_seed001_example_usage() -> None:
    def length_reward(completion, **kwargs):
        """Reward longer responses."""
        text = completion if isinstance(completion, str) else completion[-1]["content"]
        return min(len(text) / 1000, 1.0)

    def correctness_reward(completion, answer, parser, **kwargs):
        parsed = parser.parse_answer(completion)
        return 1.0 if parsed == answer else 0.0

    rubric = Rubric(funcs=[correctness_reward, length_reward], weights=[1.0, 0.1], parser=Parser())
    rubric.add_metric(lambda completion, **kw: len(completion), weight=0.0)
    state = {
        "prompt": "What is 2+2?",
        "completion": [{"role": "assistant", "content": "4"}],
        "answer": "4",
        "task": "math",
        "timing": {"scoring_ms": 0, "total_ms": 0},
    }
    await rubric.score_rollout(state)
    assert state["reward"] == pytest.approx(1.0001)  # 1.0 * 1.0 + 0.001 * 0.1
    assert state["metrics"] == {"correctness_reward": 1.0, "length_reward": 0.001, "<lambda>": 1.0}
    assert state["timing"]["scoring_ms"] > 0


async def test_seed001_group_scoring_example() -> None:
    def relative_quality(completions, **kwargs):
        lengths = [len(c[-1]["content"]) for c in completions]
        median = sorted(lengths)[len(lengths) // 2]
        return [1.0 if n >= median else 0.0 for n in lengths]

    rubric = Rubric(funcs=[relative_quality], weights=[1.0])
    states = [create_state(i) for i in range(10)]  # completion lengths 1..10, median 6
    await rubric.score_group(states)
    rewards = [s["reward"] for s in states]
    assert rewards == [0.0] * 5 + [1.0] * 5
    # mean reward 0.5: advantages are -0.5 for the short half and +0.5 for the long half
    assert [s["advantage"] for s in states] == [-0.5] * 5 + [0.5] * 5


# -- reward function signatures --------------------------------------------------------------------


def exact_match(answer: str, completion: str, **kwargs) -> float:
    return 1.0 if answer.lower() in completion.lower() else 0.0


def parsed_match(answer: str, completion: str, parser: Parser, **kwargs) -> float:
    extracted = parser.parse_answer(completion)
    return 1.0 if extracted == answer else 0.0


def efficiency_reward(state: State, **kwargs) -> float:
    num_turns = len(state["trajectory"])
    return max(0.0, 1.0 - num_turns / 10)


async def test_seed003_individual_examples() -> None:
    rubric = Rubric(funcs=[exact_match, parsed_match, efficiency_reward])
    state = {"completion": "Paris", "answer": "paris", "trajectory": [{}, {}, {}]}
    await rubric.score_rollout(state)
    # exact_match: "paris" in "paris" -> 1.0; parsed_match: "Paris" != "paris" -> 0.0; 1 - 3/10 = 0.7
    assert state["metrics"] == {
        "exact_match": 1.0,
        "parsed_match": 0.0,
        "efficiency_reward": pytest.approx(0.7),
    }
    assert state["reward"] == pytest.approx(1.7)


def rank_reward(completions: list[str], **kwargs) -> list[float]:
    lengths = [len(c) for c in completions]
    median = sorted(lengths)[len(lengths) // 2]
    return [1.0 if n >= median else 0.0 for n in lengths]


def best_of_n(completions: list[str], answers: list[str], **kwargs) -> list[float]:
    scores = [1.0 if ans in comp else 0.0 for ans, comp in zip(answers, completions, strict=True)]
    max_score = max(scores)
    return [1.0 if s == max_score else 0.0 for s in scores]


def majority_vote(completions: list[str], answer: str, parser: Parser, **kwargs) -> list[float]:
    parsed = [parser.parse_answer(c) for c in completions]
    majority_answer = Counter(parsed).most_common(1)[0][0]
    return [1.0 if p == majority_answer or p == answer else 0.0 for p in parsed]  # noqa: SIM109 (the example verbatim)


async def test_seed003_group_examples() -> None:
    completions = ["7", "7", "8", "the answer is 9"]
    states = [{"completion": c, "answer": "9"} for c in completions]
    rubric = Rubric(funcs=[rank_reward, best_of_n, majority_vote])
    await rubric.score_group(states)
    # rank_reward: lengths [1, 1, 1, 15], median 1 -> all 1.0
    assert [s["metrics"]["rank_reward"] for s in states] == [1.0, 1.0, 1.0, 1.0]
    # best_of_n: only "the answer is 9" contains "9"
    assert [s["metrics"]["best_of_n"] for s in states] == [0.0, 0.0, 0.0, 1.0]
    # majority_vote: majority "7"; the shared singular answer "9" matches none exactly
    assert [s["metrics"]["majority_vote"] for s in states] == [1.0, 1.0, 0.0, 0.0]


async def test_seed003_metrics_with_weight_zero() -> None:
    def response_length(completion: str, **kwargs) -> float:
        return float(len(completion))

    rubric = Rubric(funcs=[exact_match, response_length], weights=[1.0, 0.0])
    rubric2 = Rubric(funcs=[exact_match])
    rubric2.add_metric(response_length)
    for r in (rubric, rubric2):
        state = {"completion": "answer: 42", "answer": "42"}
        await r.score_rollout(state)
        assert state["reward"] == 1.0
        assert state["metrics"] == {"exact_match": 1.0, "response_length": 10.0}


async def test_seed003_async_support() -> None:
    async def async_individual(completion: str, **kwargs) -> float:
        await asyncio.sleep(0)
        return float(len(completion))

    async def async_group(completions: list[str], **kwargs) -> list[float]:
        return list(await asyncio.gather(*[async_individual(c) for c in completions]))

    rubric = Rubric(funcs=[async_individual, async_group], weights=[1.0, 0.5])
    states = [{"completion": "ab"}, {"completion": "abcd"}]
    await rubric.score_group(states)
    assert [s["reward"] for s in states] == [3.0, 6.0]  # len + 0.5 * len
    assert [s["advantage"] for s in states] == [-1.5, 1.5]


async def test_seed003_class_objects() -> None:
    class CustomScorer:
        def score(self, text: str) -> float:
            return len(text) / 100

    scorer = CustomScorer()

    def use_scorer(completion: str, scorer: CustomScorer, **kwargs) -> float:
        return scorer.score(completion)

    rubric = Rubric(funcs=[use_scorer])  # as written in the seed: the function first, its object second
    rubric.add_class_object("scorer", scorer)
    state = {"completion": "x" * 50}
    await rubric.score_rollout(state)
    assert state["reward"] == 0.5


def test_seed003_type_checking_section() -> None:
    def my_reward(answer: str, completion: Messages, state: State, **kwargs) -> float:
        return 1.0

    func: RewardFunc = my_reward
    assert callable(func)
