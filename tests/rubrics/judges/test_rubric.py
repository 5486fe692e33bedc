"""JudgeRubric: judges as reward functions, mixed into a rubric group, a raising judge marking the rollout."""

from __future__ import annotations

import math
from typing import Any

from rubrics import RubricGroup
from rubrics.judges import (
    CallableJudge,
    Judge,
    JudgeRubric,
    KeywordJudge,
    LLMJudgeClient,
    RegexJudge,
)
from tests.support.judge_server import JudgeServer

from .conftest import judge_of

# -- JudgeRubric ----------------------------------------------------------------------------------------


async def test_judge_rubric_reward_funcs_call_the_judge(server: JudgeServer, client: LLMJudgeClient) -> None:
    async def safety(judge: Judge, prompt: Any, completion: Any, answer: Any, state: Any) -> float:
        verdict = await judge(prompt, completion, answer, state)
        return float(verdict.answer)

    rubric = JudgeRubric(judge=judge_of(client), funcs=[safety], weights=[2.0])
    rubric.add_judge_reward(KeywordJudge(["ems"]), weight=1.0, name="calls_ems")
    state: dict[str, Any] = {"prompt": "p", "completion": "scene is safe, calling EMS", "answer": "yes"}
    await rubric.score_rollout(state)  # type: ignore[arg-type]
    assert state["reward"] == 3.0  # 2.0 * 1.0 (LLM judge) + 1.0 * 1.0 (keyword judge)
    assert state["metrics"] == {"safety": 1.0, "calls_ems": 1.0}


async def test_judge_rubric_mixes_into_a_rubric_group(client: LLMJudgeClient) -> None:
    llm = JudgeRubric()
    llm.add_judge_reward(judge_of(client), name="llm_safety")
    rules = JudgeRubric()
    rules.add_judge_reward(RegexJudge(r"\bsafe\b"), weight=0.5, name="says_safe")
    state: dict[str, Any] = {"prompt": "p", "completion": "it is safe"}
    await RubricGroup([llm, rules]).score_rollout(state)  # type: ignore[arg-type]
    assert state["reward"] == 1.5 and set(state["metrics"]) == {"llm_safety", "says_safe"}


async def test_a_raising_rule_judge_marks_the_rollout() -> None:
    def broken(completion: str) -> bool:
        raise RuntimeError("checker crashed")

    rubric = JudgeRubric()
    rubric.add_judge_reward(CallableJudge(broken), name="broken")
    state: dict[str, Any] = {"prompt": "p", "completion": "c"}
    await rubric.score_rollout(state)  # type: ignore[arg-type]
    assert math.isnan(state["reward"]) and state["metrics"]["errors/broken"] == 1.0
    assert "checker crashed" in state["error"]
