"""Demonstrations: conversations of training scenarios to imitate (``warm_start.demonstrations``) or to play
in guided groups (``rollout.guide``), one JSON object a line, ``{"scenario": ..., "messages": [...]}``; the
messages alternate, the user first. Plain Python: the orchestrator reads them without torch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rubrics.error_text import show
from rubrics.loading import FileLoadError, parse_jsonl


@dataclass(frozen=True)
class Demonstration:
    """One conversation to imitate."""

    scenario: str
    """The scenario it plays (checked against the held-out ones)."""
    messages: list[dict[str, str]]
    """User and assistant turns, the first a user's, no system message."""


def load_demonstrations(path: str | Path) -> list[Demonstration]:
    """The demonstrations of a JSONL file, one ``{"scenario": ..., "messages": [...]}`` per line (other
    keys, such as ``reward``, are kept out of the way).

    Raises:
        FileLoadError: naming the file, the line, the field and what is wrong."""
    demos = [_demonstration(data, path, lineno) for lineno, data in parse_jsonl(path)]
    if not demos:
        raise FileLoadError(path, "no demonstrations (expected one JSON object per line)")
    return demos


def _demonstration(data: Any, path: str | Path, line: int) -> Demonstration:
    def fail(field: str | None, reason: str) -> FileLoadError:
        return FileLoadError(path, reason, line, field)

    if not isinstance(data, dict):
        raise fail(None, f"wrong type (expected an object with scenario and messages, got {show(data)})")
    scenario, messages = data.get("scenario"), data.get("messages")
    if not isinstance(scenario, str) or not scenario.strip():
        raise fail("scenario", f"expected the scenario's name, got {show(scenario)}")
    if not isinstance(messages, list) or not messages:
        raise fail("messages", f"expected a non-empty list of messages, got {show(messages)}")
    for i, message in enumerate(messages):
        expected = "user" if i % 2 == 0 else "assistant"
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            raise fail(f"messages[{i}]", f"expected {{role, content}}, got {show(message)}")
        if message["role"] != expected:
            raise fail(
                f"messages[{i}].role",
                f"expected {expected!r} (turns alternate, the user first), got {show(message['role'])}",
            )
        if not isinstance(message["content"], str) or not message["content"].strip():
            raise fail(f"messages[{i}].content", f"expected non-empty text, got {show(message['content'])}")
    if len(messages) < 2:
        raise fail("messages", "no assistant reply to imitate")
    return Demonstration(scenario, [dict(m) for m in messages])


def check_not_held_out(demos: Sequence[Demonstration], held_out: Sequence[str], path: str | Path) -> None:
    """Refuse demonstrations of held-out scenarios (they would leak the evaluation).

    Raises:
        FileLoadError: naming the first such scenario and how many there are."""
    held = set(held_out)
    leaked = [d.scenario for d in demos if d.scenario in held]
    if leaked:
        raise FileLoadError(
            path,
            f"{len(leaked)} demonstration(s) play held-out scenarios (the first: {leaked[0]!r}); "
            "imitating them would leak the evaluation",
            field="scenario",
        )
