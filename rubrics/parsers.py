"""Parsers: pull the answer out of a completion (a string, or chat messages).

``Parser`` returns the text as is; ``XMLParser`` reads tagged fields (``<think>...</think><answer>...
</answer>``), formats them and rewards well-formed output; ``ThinkParser`` drops a leading
``<think>...</think>`` block and returns what follows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from rubrics.types import Messages


def last_message_text(completion: Messages | str | None, role: str = "assistant") -> str | None:
    """The text of ``completion`` when it is a string, else the content of its last ``role`` message."""
    if completion is None:
        return None
    if isinstance(completion, str):
        return completion
    for message in reversed(completion):
        if message.get("role") == role:
            content = message.get("content")
            return content if isinstance(content, str) else None
    return None


def assistant_texts(completion: Messages | str | None) -> list[str]:
    """Every assistant message's text, oldest first (a plain string is one message)."""
    if completion is None:
        return []
    if isinstance(completion, str):
        return [completion]
    return [
        m["content"] for m in completion if m.get("role") == "assistant" and isinstance(m.get("content"), str)
    ]


class Parser:
    """The identity parser: the answer is the (last assistant) text, passed through ``extract_fn``."""

    def __init__(self, extract_fn: Callable[[str], str | None] = lambda text: text) -> None:
        self.extract_fn = extract_fn

    def parse(self, text: str) -> Any:
        """Parse one text."""
        return self.extract_fn(text)

    def parse_answer(self, completion: Messages | str) -> str | None:
        """The answer in a completion: the parsed text, or the parsed last assistant message."""
        text = last_message_text(completion)
        return None if text is None else self.parse(text)

    def get_format_reward_func(self) -> Callable[..., float]:
        """A reward function for well-formed output; the plain parser accepts everything (1.0)."""

        def format_reward(completion: Messages | str, **kwargs: Any) -> float:
            return 1.0

        return format_reward


class ThinkParser(Parser):
    """Expects ``<think>...</think>`` then the answer; ``parse`` returns the text after ``</think>``."""

    def parse(self, text: str) -> str | None:
        if "</think>" in text:
            text = text.rsplit("</think>", 1)[1]
        elif "<think>" in text:
            return None  # reasoning never closed: there is no answer yet
        return self.extract_fn(text.strip())

    def get_format_reward_func(self) -> Callable[..., float]:
        """1.0 when every assistant message is one think block followed by a non-empty answer."""

        def well_formed(text: str) -> bool:
            head, sep, answer = text.strip().partition("</think>")
            return (
                bool(sep)
                and head.startswith("<think>")
                and head.count("<think>") == 1
                and "<think>" not in answer
                and "</think>" not in answer
                and bool(answer.strip())
            )

        def think_format_reward(completion: Messages | str, **kwargs: Any) -> float:
            texts = assistant_texts(completion)
            if not texts:
                return 0.0
            return sum(1.0 for t in texts if well_formed(t)) / len(texts)

        return think_format_reward


class XMLParser(Parser):
    """Reads tagged fields. ``fields`` are names, or tuples of alternative names for one field
    (``("code", "answer")``: the first name is canonical and used by ``format``)."""

    def __init__(self, fields: Sequence[str | tuple[str, ...]], answer_field: str = "answer") -> None:
        super().__init__()
        if not fields:
            raise ValueError("XMLParser needs at least one field")
        self._fields: list[tuple[str, tuple[str, ...]]] = []
        seen: set[str] = set()
        for spec in fields:
            names = (spec,) if isinstance(spec, str) else tuple(spec)
            if not names or not all(
                isinstance(n, str) and re.fullmatch(r"[A-Za-z_][\w-]*", n) for n in names
            ):
                raise ValueError(f"XMLParser field {spec!r} is not a tag name (or a tuple of tag names)")
            for n in names:
                if n in seen:
                    raise ValueError(f"XMLParser field name {n!r} appears twice")
                seen.add(n)
            self._fields.append((names[0], names))
        self.answer_field = answer_field
        self._patterns = {
            n: re.compile(rf"<{re.escape(n)}>\s*(.*?)\s*</{re.escape(n)}>", re.DOTALL) for n in seen
        }

    @property
    def fields(self) -> list[str]:
        """Canonical field names, in order."""
        return [canonical for canonical, _ in self._fields]

    def parse(self, text: str, strip: bool = True) -> SimpleNamespace:
        """A namespace with one attribute per field name (alternatives included); None where absent."""
        result = SimpleNamespace()
        for _, names in self._fields:
            for n in names:
                match = self._patterns[n].search(text)
                value = None
                if match:
                    value = match.group(1).strip() if strip else match.group(1)
                setattr(result, n, value)
        return result

    def parse_answer(self, completion: Messages | str) -> str | None:
        """The ``answer_field`` of the latest assistant message that has one."""
        for text in reversed(assistant_texts(completion)):
            value = getattr(self.parse(text), self.answer_field, None)
            if value is not None:
                return value
        return None

    def format(self, **kwargs: Any) -> str:
        """Render fields as tagged text; every canonical field (or one of its alternatives) is required."""
        parts = []
        for canonical, names in self._fields:
            name = next((n for n in names if n in kwargs), None)
            if name is None:
                raise ValueError(f"XMLParser.format: missing field {canonical!r}")
            parts.append(f"<{name}>\n{kwargs[name]}\n</{name}>")
        return "\n".join(parts)

    def get_format_str(self) -> str:
        """Instructions that tell a model the expected format."""
        lines = []
        for _, names in self._fields:
            tag = names[0] if len(names) == 1 else " | ".join(names)
            lines.append(f"<{tag}>\n...\n</{tag}>")
        return "Respond in the following format:\n" + "\n".join(lines)

    def get_format_reward_func(self) -> Callable[..., float]:
        """Fraction of assistant messages that contain every field exactly once, in order."""

        def xml_format_reward(completion: Messages | str, **kwargs: Any) -> float:
            texts = assistant_texts(completion)
            if not texts:
                return 0.0
            return sum(self._well_formed(t) for t in texts) / len(texts)

        return xml_format_reward

    def _well_formed(self, text: str) -> float:
        position = 0
        for _, names in self._fields:
            hits = [(m.start(), m.end()) for n in names for m in self._patterns[n].finditer(text)]
            if len(hits) != 1 or hits[0][0] < position:
                return 0.0
            position = hits[0][1]
        return 1.0
