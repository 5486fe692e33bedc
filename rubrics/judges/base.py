"""The one judge protocol that LLM judges and rule judges share, and helpers to render a rollout as text."""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

from rubrics.judges.formats import JudgeResponse, JudgeResponseFormat
from rubrics.types import Messages


class JudgeError(RuntimeError):
    """A judge could not produce a verdict (an LLM judge raises it after its last retry)."""


@runtime_checkable
class Judge(Protocol):
    """Anything that turns one rollout into a verdict: ``await judge(prompt, completion, answer, state)``."""

    name: str
    """Name used in metrics and error messages."""
    response_format: JudgeResponseFormat
    """The shape of the verdict's answer."""

    async def __call__(
        self,
        prompt: Messages | str | None,
        completion: Messages | str | None,
        answer: Any = None,
        state: dict[str, Any] | None = None,
    ) -> JudgeResponse:
        """Judge one rollout."""
        ...


def render_messages(messages: Messages | str | None) -> str:
    """A conversation as plain text, one ``role: content`` block per message (a string is returned as is)."""
    if messages is None:
        return ""
    if isinstance(messages, str):
        return messages
    blocks = []
    for message in messages:
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        blocks.append(f"{message.get('role', 'user')}: {text}")
    return "\n\n".join(blocks)


def response_text(completion: Messages | str | None) -> str:
    """What the model wrote: the string itself, or every assistant message joined by blank lines."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    return "\n\n".join(
        m["content"] for m in completion if m.get("role") == "assistant" and isinstance(m.get("content"), str)
    )


def ground_truth_parts(answer: Any) -> tuple[str, str] | None:
    """The ground truth and its reasoning, when the scenario has one (``None`` when it has none)."""
    if answer is None or answer == "":
        return None
    if isinstance(answer, JudgeResponse):
        return _text(answer.answer), answer.reasoning
    if isinstance(answer, dict) and "answer" in answer:
        reasoning = answer.get("reasoning") or answer.get("explanation") or ""
        return _text(answer["answer"]), str(reasoning)
    return _text(answer), ""


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return f"{value:.1f}"
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else str(value)
