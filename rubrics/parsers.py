"""Parsers: pull the answer out of a completion (a string, or chat messages).

``Parser`` returns the text as is; ``XMLParser`` reads tagged fields (``<think>...</think><answer>...
</answer>``), formats them and rewards well-formed output; ``ThinkParser`` drops a leading
``<think>...</think>`` block and returns what follows.

The API is verifiers 0.2.1's (``parse``, ``parse_answer``, ``get_assistant_messages``, ``get_fields``,
``format``, ``get_format_str``, ``get_format_reward_func``), so environments written against it port as they
are. Where the behaviour differs, on purpose:

- A plain string completion counts as one assistant message everywhere (verifiers wants a message list in
  ``get_assistant_messages`` and the format rewards), and a completion without assistant messages scores
  0.0 in every format reward (verifiers' ``ThinkParser`` divides by zero).
- ``XMLParser``'s format reward gives a reply with no field at all 0.0, not 0.2, and its "well-formed"
  part checks something (each field at most once, in the declared order, no tag left open); verifiers'
  spacing part is true for any reply, so plain text earned 0.2.
- ``ThinkParser`` on a reply without any think tag returns the reply (verifiers returns ``""``): models
  that never think (the SmolLM2 demo) are still graded on what they answer, and thinking is rewarded by
  the format reward. A ``<think>`` that is never closed has no answer (``None``).
- ``XMLParser`` needs at least one field and refuses a name used twice, alternatives included.
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

    def get_assistant_messages(self, completion: Messages | str | None) -> Messages:
        """The assistant messages of ``completion``, oldest first (a plain string is one message)."""
        return _with_role(completion, "assistant")

    def get_user_messages(self, completion: Messages | str | None) -> Messages:
        """The user messages of ``completion``."""
        return _with_role(completion, "user")

    def get_system_messages(self, completion: Messages | str | None) -> Messages:
        """The system messages of ``completion``."""
        return _with_role(completion, "system")

    def get_tool_messages(self, completion: Messages | str | None) -> Messages:
        """The tool messages of ``completion``."""
        return _with_role(completion, "tool")

    def get_format_reward_func(self) -> Callable[..., float]:
        """A reward function for well-formed output; the plain parser accepts everything (1.0)."""

        def format_reward(completion: Messages | str, **kwargs: Any) -> float:
            return 1.0

        return format_reward


def _with_role(completion: Messages | str | None, role: str) -> Messages:
    if completion is None:
        return []
    if isinstance(completion, str):
        return [{"role": "assistant", "content": completion}] if role == "assistant" else []
    return [m for m in completion if m.get("role") == role]


class ThinkParser(Parser):
    """Expects ``<think>...</think>`` then the answer; ``parse`` returns the text after the last ``</think>``.

    A reply without any think tag is all answer (verifiers returns ``""`` there; see the module docstring);
    a ``<think>`` never closed means no answer yet (``None``)."""

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

    def get_fields(self) -> list[str]:
        """Canonical field names, in order (``fields``)."""
        return self.fields

    def parse(self, text: str, strip: bool = True, last: bool = False) -> SimpleNamespace:
        """A namespace with one attribute per field name (alternatives included); None where absent. The
        first occurrence of each tag is read, or the last with ``last=True``."""
        result = SimpleNamespace()
        for _, names in self._fields:
            for n in names:
                matches = list(self._patterns[n].finditer(text))
                value = None
                if matches:
                    found = matches[-1 if last else 0].group(1)
                    value = found.strip() if strip else found
                setattr(result, n, value)
        return result

    def parse_answer(self, completion: Messages | str) -> str | None:
        """The ``answer_field``: in a string, its last occurrence; in messages, the first occurrence in the
        latest assistant message that has one."""
        if isinstance(completion, str):
            return getattr(self.parse(completion, last=True), self.answer_field, None)
        for text in reversed(assistant_texts(completion)):
            value = getattr(self.parse(text), self.answer_field, None)
            if value is not None:
                return value
        return None

    def format(self, **kwargs: Any) -> str:
        """Render fields as tagged text under their canonical tag; each value may be given under the canonical
        name (preferred) or any alternative, and every field is required."""
        parts = []
        for canonical, names in self._fields:
            name = next((n for n in names if n in kwargs), None)
            if name is None:
                raise ValueError(f"XMLParser.format: missing field {canonical!r} (any of {', '.join(names)})")
            parts.append(f"<{canonical}>\n{kwargs[name]}\n</{canonical}>")
        return "\n".join(parts)

    def get_format_str(self) -> str:
        """Instructions that tell a model the expected format."""
        lines = []
        for _, names in self._fields:
            tag = names[0] if len(names) == 1 else " | ".join(names)
            lines.append(f"<{tag}>\n...\n</{tag}>")
        return "Respond in the following format:\n" + "\n".join(lines)

    def get_format_reward_func(self) -> Callable[..., float]:
        """The mean over assistant messages of a per-message score in [0, 1] (0.0 with no assistant message):

        - 0.4 x the fraction of fields present (a field is present when one of its names has an opening and
          a closing tag);
        - 0.2 when at least one field is present and the reply is well formed: each field at most once, in
          the declared order, and no tag of a field left unclosed;
        - 0.2 when the reply starts with an opening tag of the first field;
        - 0.2 when it ends with a closing tag of the last field.

        So ``<think>a</think><answer>b</answer>`` scores 1.0, ``<think>a</think>`` alone 0.6 (0.2 + 0.2 +
        0.2), and plain text 0.0 (see the module docstring for where this departs from verifiers)."""

        def xml_format_reward(completion: Messages | str, **kwargs: Any) -> float:
            texts = assistant_texts(completion)
            if not texts:
                return 0.0
            return sum(self._format_score(t) for t in texts) / len(texts)

        return xml_format_reward

    def _format_score(self, text: str) -> float:
        stripped = text.strip()
        spans = [
            [(m.start(), m.end()) for n in names for m in self._patterns[n].finditer(text)]
            for _, names in self._fields
        ]
        present = sum(1 for hits in spans if hits)
        score = 0.4 * present / len(self._fields)
        if present and self._well_formed(text, spans):
            score += 0.2
        if any(stripped.startswith(f"<{n}>") for n in self._fields[0][1]):
            score += 0.2
        if any(stripped.endswith(f"</{n}>") for n in self._fields[-1][1]):
            score += 0.2
        return score

    def _well_formed(self, text: str, spans: list[list[tuple[int, int]]]) -> bool:
        position = 0
        for hits in spans:
            if len(hits) > 1 or (hits and hits[0][0] < position):
                return False
            position = hits[0][1] if hits else position
        names = [n for _, alternatives in self._fields for n in alternatives]
        return all(text.count(f"<{n}>") == text.count(f"</{n}>") for n in names)
