"""How one value is written as YAML text in the style of the text around it (for ``envs.gui.splice``).

A phrase written next to double-quoted ones is double-quoted, next to plain ones plain where YAML reads it
back as the same string; a flow list wraps at the author's width with its items aligned; a folded question
keeps the author's lines wherever their words did not change.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import yaml


def usual_width(text: str) -> int:
    """The width the author wraps at: what 95% of the long lines stay within (80 to 120)."""
    lengths = sorted(len(line.rstrip()) for line in text.splitlines() if len(line.rstrip()) > 60)
    if not lengths:
        return 100
    return min(120, max(80, lengths[int(0.95 * (len(lengths) - 1))]))


def double_quoted(node: yaml.Node) -> bool:
    """Whether the node, or one item of the list it is, is double-quoted."""
    if isinstance(node, yaml.ScalarNode):
        return node.style == '"'
    items = node.value if isinstance(node, yaml.SequenceNode) else []
    return any(isinstance(i, yaml.ScalarNode) and i.style == '"' for i in items)


def scalar(value: Any, quoted: bool) -> str:
    """One value in flow style (a string double-quoted when ``quoted``)."""
    if quoted and isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10**9)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def item(value: Any, like: yaml.ScalarNode, flow: bool) -> str:
    """One list item written like its neighbour ``like``: single-quoted, double-quoted, or plain where the
    value reads back as itself unquoted (else double-quoted)."""
    if not isinstance(value, str):
        return scalar(value, False)
    if like.style == "'" and "\n" not in value:
        return "'" + value.replace("'", "''") + "'"
    if like.style is None and _reads_back_plain(value, flow):
        return value
    return json.dumps(value, ensure_ascii=False)


def _reads_back_plain(value: str, flow: bool) -> bool:
    if not value or value != value.strip() or "\n" in value or " #" in value:
        return False
    try:
        loaded = yaml.safe_load(f"[{value}]" if flow else f"- {value}")
    except yaml.YAMLError:
        return False
    return bool(loaded == [value])


def flow(value: Any, quoted: bool, column: int, width: int) -> str:
    """``value`` in flow style; a list of strings wrapped to ``width`` with its items aligned."""
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        parts = [scalar(v, quoted) for v in value]
        lines, line = [], "["
        for i, part in enumerate(parts):
            piece = part + ("]" if i == len(parts) - 1 else ",")
            if len(line) > 1 and column + len(line) + 1 + len(piece) > width:
                lines.append(line)
                line = " " * (column + 1) + piece
            else:
                line += ("" if len(line) == 1 or line.endswith("[") else " ") + piece
        return "\n".join([*lines, line])
    return scalar(value, quoted)


def block(value: Any, width: int) -> str:
    """``value`` in block style (lists of plain values in flow style, as authors write phrase lists)."""
    return yaml.safe_dump(
        value, sort_keys=False, allow_unicode=True, default_flow_style=None, width=max(40, width)
    ).rstrip("\n")


def rewrap(old_lines: list[str], value: str, width: int) -> list[str]:
    """The words of ``value`` (one folded paragraph) in lines of at most ``width``: the author's lines
    ``old_lines`` at either end whose words are unchanged stay as written, the words between are wrapped
    (into the last kept line before them too, when the change starts a line or ends the paragraph)."""
    words = value.split(" ")
    lines = [line.split(" ") for line in old_lines]
    head = used = 0
    while head < len(lines) and words[used : used + len(lines[head])] == lines[head]:
        used += len(lines[head])
        head += 1
    tail, left = 0, len(words)
    while head + tail < len(lines):
        line = lines[-1 - tail]
        if left - len(line) < used or words[left - len(line) : left] != line:
            break
        left -= len(line)
        tail += 1
    if used == left and head + tail == len(lines):
        return old_lines[:head] + old_lines[len(lines) - tail :]
    mid_line = head + tail < len(lines) and used < len(words) and words[used] == lines[head][0]
    if head and not mid_line:
        head -= 1
        used -= len(lines[head])
    middle = textwrap.wrap(" ".join(words[used:left]), width, break_long_words=False, break_on_hyphens=False)
    return old_lines[:head] + middle + old_lines[len(lines) - tail :]
