"""The LLM judge's prompt: the question, the response and the ground truth with its reasoning."""

from __future__ import annotations

from rubrics.judges import (
    ContinuousJudgeResponseFormat,
    LLMJudge,
    LLMJudgeClient,
)
from tests.support.judge_server import JudgeServer


async def test_prompt_shows_question_response_and_ground_truth_with_reasoning(
    server: JudgeServer, client: LLMJudgeClient
) -> None:
    judge = LLMJudge(client, "Is the dose correct?", ContinuousJudgeResponseFormat(0, 1))
    server.responder = lambda body: '{"answer": 0.7, "reasoning": "mostly"}'
    prompt = [{"role": "user", "content": "The patient weighs 20 kg. What dose?"}]
    completion = [{"role": "assistant", "content": "Give 200 mg."}]
    answer = {"answer": 15.0, "reasoning": "15 mg/kg times 20 kg is 300 mg; 15 is the per-kg dose."}
    verdict = await judge(prompt, completion, answer, {})
    assert verdict.answer == 0.7
    body = server.requests[0]
    user = body["messages"][1]["content"]
    for text in (
        "The patient weighs 20 kg",
        "Give 200 mg.",
        "Is the dose correct?",
        "15.0",
        "15 mg/kg times 20",
    ):
        assert text in user
    assert "from 0 to 1 inclusive" in user
    assert body["max_tokens"] >= 1024 and body["model"] == "judge-model"
