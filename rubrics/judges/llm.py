"""``LLMJudge``: a question about a rollout, answered by a model through an ``LLMJudgeClient``.

The prompt shows the conversation the policy saw, its response, the ground truth with its reasoning when
the scenario has one (never a bare number alone), the question to decide, and the format's exact
instruction. The verdict is parsed strictly by the response format; a reply that does not parse is
retried by the client and, after the last attempt, raises ``JudgeError``.
"""

from __future__ import annotations

from typing import Any

from rubrics.judges.base import ground_truth_parts, render_messages, response_text
from rubrics.judges.client import LLMJudgeClient, StructuredReply
from rubrics.judges.formats import JudgeResponse, JudgeResponseFormat, binary_judge_response_format
from rubrics.types import Messages

DEFAULT_JUDGE_SYSTEM_PROMPT = (
    "You are a strict, fair grader. You read a conversation, the response under evaluation and, when "
    "given, the ground truth. You answer one question about the response. Judge only what the response "
    "says; do not reward confident tone or keywords that ignore the situation. Answer in the exact JSON "
    "format requested and nothing else."
)
"""System prompt of every LLM judge unless one is given."""


def judge_user_prompt(
    question: str,
    prompt: Messages | str | None,
    completion: Messages | str | None,
    answer: Any,
    response_format: JudgeResponseFormat,
) -> str:
    """What an LLM judge is asked: the conversation, the response, the ground truth, the question and the
    format's instruction."""
    sections = [
        f"<conversation>\n{render_messages(prompt)}\n</conversation>",
        f"<response>\n{response_text(completion)}\n</response>",
    ]
    truth = ground_truth_parts(answer)
    if truth is not None:
        value, reasoning = truth
        body = f"<answer>{value}</answer>"
        if reasoning:
            body += f"\n<reasoning>{reasoning}</reasoning>"
        sections.append(f"<ground_truth>\n{body}\n</ground_truth>")
    sections.append(f"<question>\n{question}\n</question>")
    sections.append(str(response_format))
    return "\n\n".join(sections)


def build_judge_messages(
    question: str,
    prompt: Messages | str | None,
    completion: Messages | str | None,
    answer: Any,
    response_format: JudgeResponseFormat,
    system_prompt: str = DEFAULT_JUDGE_SYSTEM_PROMPT,
) -> list[dict[str, Any]]:
    """The chat messages an LLM judge receives (what ``LLMJudgeClient.ask`` sends for it)."""
    user_prompt = judge_user_prompt(question, prompt, completion, answer, response_format)
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": user_prompt}]


class LLMJudge:
    """Asks ``question`` about a rollout; ``await judge(prompt, completion, answer, state)`` -> verdict."""

    def __init__(
        self,
        client: LLMJudgeClient,
        question: str,
        response_format: JudgeResponseFormat = binary_judge_response_format,
        name: str | None = None,
        system_prompt: str = DEFAULT_JUDGE_SYSTEM_PROMPT,
    ) -> None:
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"LLMJudge needs a non-empty question (got {question!r})")
        self.client = client
        """The endpoint (shared concurrency, retries, cache)."""
        self.question = question
        """What the judge decides about the response."""
        self.response_format = response_format
        """The verdict's shape and its parser."""
        self.name = name or question[:40]
        """Name used in metrics and error messages."""
        self.system_prompt = system_prompt
        """The judge model's system prompt."""

    async def __call__(
        self,
        prompt: Messages | str | None,
        completion: Messages | str | None,
        answer: Any = None,
        state: dict[str, Any] | None = None,
    ) -> JudgeResponse:
        """Judge one rollout (raises ``JudgeError`` when no valid verdict comes back)."""
        user_prompt = judge_user_prompt(self.question, prompt, completion, answer, self.response_format)
        reply = StructuredReply(self.response_format.convert, self.response_format.json_schema())
        return await self.client.ask(self.system_prompt, user_prompt, reply)
