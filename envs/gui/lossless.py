"""Saving a rubric without losing its author's comments and layout: the file is edited in place.

The app edits plain data (``envs.gui.document``); the file it came from has comments, blank lines,
hand-wrapped phrase lists and its own quoting, none of which plain data holds. So a save does not re-dump
the document: it compares the document with the one the file was loaded as, and rewrites only the text of
the values that changed (their spans come from PyYAML's node marks), so every other byte stays as written.
A changed phrase list keeps its flow or block style and its quoting; a changed folded or literal question
stays a block scalar; a new requirement or key is appended in the style of its siblings.

This is closer to the author's file than ruamel.yaml's round-trip mode, which keeps comments but re-flows
every flow list and breaks long quoted strings even where nothing changed. Every plan is checked: the text
is loaded back through the library and must give the document; when it does not (or the file is JSON), the
save falls back to a plain re-dump and ``SavePlan.note`` says so. ``SavePlan.lost_comments`` lists the
comment lines a save drops (those inside a deleted requirement, or all of them on a re-dump), so the app can
say so before it overwrites.
"""

from __future__ import annotations

import copy
import json
import re
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import yaml

from envs.gui.document import Doc, to_yaml
from rubrics.multistep.io import RubricFileError, rubric_from_dict, rubric_to_dict

_MISSING = object()


@dataclass(frozen=True)
class SavePlan:
    """What a save would write, and what it would lose."""

    text: str
    """The file's new content."""
    in_place: bool
    """True: the source file edited in place (comments and layout kept); False: a plain re-dump."""
    lost_comments: list[str] = field(default_factory=list)
    """Comment lines of the source that ``text`` no longer has."""
    note: str = ""
    """Why the save is a re-dump, when it is one of a file that had text."""


@dataclass(frozen=True)
class _Edit:
    start: int
    end: int
    text: str


class _Unsupported(Exception):
    """A change this module cannot place in the text (the caller re-dumps)."""


def plan_save(doc: Doc, source_text: str | None, source_doc: Doc | None) -> SavePlan:
    """The text to save ``doc`` as: ``source_text`` (loaded as ``source_doc``) with the changes spliced in,
    or a re-dump when there is no source or the splice does not load back as ``doc``."""
    dumped = to_yaml(doc)
    if not source_text or source_doc is None:
        return SavePlan(dumped, in_place=False)
    try:
        meaning: Any = _meaning(doc)
    except (RubricFileError, ValueError):
        meaning = None  # an invalid document is never written: the text is only a preview
    try:
        text = splice(source_text, source_doc, doc)
        if meaning is not None and _meaning(yaml.safe_load(text)) != meaning:
            raise _Unsupported("the edited text does not load back as the document")
    except (_Unsupported, yaml.YAMLError, RubricFileError, ValueError) as exc:
        return SavePlan(dumped, False, lost_comments(source_text, dumped), note=f"re-dumped: {exc}")
    return SavePlan(text, True, lost_comments(source_text, text))


def _meaning(data: Any) -> Any:
    """What the library makes of ``data`` (so equal meanings compare equal whatever the spelling)."""
    return rubric_to_dict(rubric_from_dict(copy.deepcopy(data), "rubric"))


_COMMENT = re.compile(r"(?:^|\s)(#.*)$")


def comment_lines(text: str) -> list[str]:
    """The comments of a YAML text, one per line that has one (a ``#`` outside quotes after a blank)."""
    out = []
    for line in text.splitlines():
        found = _COMMENT.search(line)
        if (
            found
            and line[: found.start(1)].count('"') % 2 == 0
            and line[: found.start(1)].count("'") % 2 == 0
        ):
            out.append(found.group(1).strip())
    return out


def lost_comments(before: str, after: str) -> list[str]:
    """Comments of ``before`` that ``after`` does not have (as many times as they are missing)."""
    missing = Counter(comment_lines(before)) - Counter(comment_lines(after))
    out = []
    for comment in comment_lines(before):
        if missing[comment] > 0:
            out.append(comment)
            missing[comment] -= 1
    return out


def splice(source: str, old: Any, new: Any) -> str:
    """``source`` (which loads as ``old``) with the text of every value that differs in ``new`` rewritten
    (``_Unsupported`` when a change cannot be placed)."""
    loader = yaml.SafeLoader(source)
    try:
        node = loader.get_single_node()
    finally:
        loader.dispose()
    if node is None:
        raise _Unsupported("the file is empty")
    edits: list[_Edit] = []
    _Splicer(source, loader, edits).merge(node, old, new)
    out = source
    last = len(source) + 1
    for edit in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        if edit.end > last:
            raise _Unsupported("overlapping edits")
        out = out[: edit.start] + edit.text + out[edit.end :]
        last = edit.start
    return out


class _Splicer:
    """Walks the file's node tree beside the old and new documents and records text edits."""

    def __init__(self, text: str, loader: yaml.SafeLoader, edits: list[_Edit]) -> None:
        self.text = text
        self.loader = loader
        self.edits = edits
        self.width = _usual_width(text)

    # -- positions --------------------------------------------------------------------------------

    def end(self, node: yaml.Node) -> int:
        """Where the node's own text ends (block collections' marks reach past trailing comments)."""
        if isinstance(node, yaml.MappingNode | yaml.SequenceNode) and not node.flow_style and node.value:
            last = node.value[-1]
            return self.end(last[1] if isinstance(last, tuple) else last)
        span = self.text[node.start_mark.index : node.end_mark.index]
        return node.start_mark.index + len(span.rstrip())

    def line_start(self, index: int) -> int:
        return self.text.rfind("\n", 0, index) + 1

    def key_value(self, key: yaml.Node) -> Any:
        try:
            return self.loader.construct_object(key, deep=True)
        except yaml.YAMLError as exc:
            raise _Unsupported(f"key at line {key.start_mark.line + 1}") from exc

    # -- the walk ---------------------------------------------------------------------------------

    def merge(self, node: yaml.Node, old: Any, new: Any) -> None:
        if _same(old, new):
            return
        if isinstance(node, yaml.MappingNode) and isinstance(old, dict) and isinstance(new, dict) and new:
            self.merge_mapping(node, old, new)
        elif isinstance(node, yaml.SequenceNode) and isinstance(old, list) and isinstance(new, list):
            if new and all(isinstance(i, dict) and "name" in i for i in [*old, *new]):
                self.merge_named(node, old, new)
            elif len(old) == len(new) == len(node.value) and all(isinstance(i, dict) for i in new):
                for item, o, n in zip(node.value, old, new, strict=True):
                    self.merge(item, o, n)
            else:
                self.replace(node, new)
        else:
            self.replace(node, new)

    def merge_mapping(self, node: yaml.MappingNode, old: dict[Any, Any], new: dict[Any, Any]) -> None:
        present = {}
        for key_node, value_node in node.value:
            present[_hashable(self.key_value(key_node))] = (key_node, value_node)
        if node.flow_style and set(present) != {_hashable(k) for k in new}:
            self.replace(node, new)
            return
        for key, (key_node, value_node) in present.items():
            if key in new:
                before = old.get(key, _MISSING)
                if before is _MISSING:
                    self.replace(value_node, new[key])
                else:
                    self.merge(value_node, before, new[key])
            elif key in old:  # removed by the edit: the whole entry, its own line(s) included
                start = self.line_start(key_node.start_mark.index)
                if self.text[start : key_node.start_mark.index].strip():
                    raise _Unsupported("a removed key shares its line")
                stop = self.text.find("\n", self.end(value_node))
                self.edits.append(_Edit(start, len(self.text) if stop < 0 else stop + 1, ""))
        added = {
            k: v for k, v in new.items() if _hashable(k) not in present and not _same(old.get(k, _MISSING), v)
        }
        if added:
            first = node.value[0][0] if node.value else None
            if first is None:
                raise _Unsupported("an empty mapping")
            column = first.start_mark.column
            lines = _block(added, self.width - column).splitlines()
            self.insert_after(node, column, lines)

    def merge_named(
        self, node: yaml.SequenceNode, old: list[dict[str, Any]], new: list[dict[str, Any]]
    ) -> None:
        """Requirements: paired by name (a renamed one with the unpaired old one in its place)."""
        if node.flow_style or len(node.value) != len(old):
            self.replace(node, new)
            return
        old_names = [o.get("name") for o in old]
        pairs = {i: old_names.index(n["name"]) for i, n in enumerate(new) if n["name"] in old_names}
        for i in range(len(new)):  # a renamed one takes the unpaired old one between its neighbours
            if i in pairs:
                continue
            lo = max((pairs[k] for k in pairs if k < i), default=-1)
            hi = min((pairs[k] for k in pairs if k > i), default=len(old))
            taken = set(pairs.values())
            spare = [j for j in range(lo + 1, hi) if j not in taken]
            if spare:
                pairs[i] = spare[0]
        order = [pairs[i] for i in sorted(pairs)]
        fresh_at = [i for i in range(len(new)) if i not in pairs]
        if order != sorted(order) or (fresh_at and pairs and min(fresh_at) < max(pairs)):
            raise _Unsupported("requirements were reordered or inserted before the last one")
        for i, j in pairs.items():
            self.merge(node.value[j], old[j], new[i])
        for j in set(range(len(old))) - set(pairs.values()):
            item = node.value[j]
            start = self.line_start(item.start_mark.index)
            stop = self.text.find("\n", self.end(item))
            self.edits.append(_Edit(start, len(self.text) if stop < 0 else stop + 1, ""))
        fresh = [new[i] for i in range(len(new)) if i not in pairs]
        if fresh:
            first = node.value[0]
            dash = self.text.rfind("-", self.line_start(first.start_mark.index), first.start_mark.index)
            if dash < 0:
                raise _Unsupported("no dash before the first item")
            column = dash - self.line_start(dash)
            lines = [""]
            for item in fresh:
                body = _block(item, self.width - column - 2).splitlines()
                lines += ["- " + body[0], *("  " + line for line in body[1:]), ""]
            self.insert_after(node, column, lines[:-1])

    def insert_after(self, node: yaml.Node, column: int, lines: list[str]) -> None:
        at = self.end(node)
        text = "".join("\n" + (" " * column + line if line else "") for line in lines)
        self.edits.append(_Edit(at, at, text))

    # -- rewriting one value ----------------------------------------------------------------------

    def replace(self, node: yaml.Node, value: Any) -> None:
        start, stop = node.start_mark.index, self.end(node)
        column = node.start_mark.column
        if isinstance(node, yaml.ScalarNode) and node.style in (">", "|") and isinstance(value, str):
            self.edits.append(_Edit(start, stop, self.block_scalar(node, value)))
        elif isinstance(node, yaml.ScalarNode) or getattr(node, "flow_style", False) or _empty(value):
            quoted = _double_quoted(node)
            self.edits.append(_Edit(start, stop, _flow(value, quoted, column, self.width)))
        else:
            indent = " " * column
            if isinstance(node, yaml.SequenceNode) and all(not isinstance(v, dict | list) for v in value):
                lines = ["- " + _scalar(v, _double_quoted(node)) for v in value]
            else:
                lines = _block(value, self.width - column).splitlines()
            self.edits.append(_Edit(start, stop, "\n".join([lines[0], *(indent + ln for ln in lines[1:])])))

    def block_scalar(self, node: yaml.ScalarNode, value: str) -> str:
        body_at = self.text.find("\n", node.start_mark.index) + 1
        line = self.text[body_at : self.text.find("\n", body_at)]
        indent = " " * (len(line) - len(line.lstrip(" ")))
        if not indent or not value.strip() or value != value.strip() or "  " in value:
            return _flow(value, True, node.start_mark.column, self.width)
        if node.style == "|":
            return "|-\n" + "\n".join(indent + ln if ln else "" for ln in value.split("\n"))
        if "\n" in value:
            return _flow(value, True, node.start_mark.column, self.width)
        wrapped = textwrap.wrap(
            value, self.width - len(indent), break_long_words=False, break_on_hyphens=False
        )
        return ">-\n" + "\n".join(indent + ln for ln in wrapped)


def _usual_width(text: str) -> int:
    """The width the author wraps at: what 95% of the long lines stay within (80 to 120)."""
    lengths = sorted(len(line.rstrip()) for line in text.splitlines() if len(line.rstrip()) > 60)
    if not lengths:
        return 100
    return min(120, max(80, lengths[int(0.95 * (len(lengths) - 1))]))


def _same(a: Any, b: Any) -> bool:
    return (type(a) is type(b) and a == b) or (
        isinstance(a, int | float) and isinstance(b, int | float) and a == b
    )


def _hashable(key: Any) -> Any:
    return key if isinstance(key, str | int | float | bool) or key is None else repr(key)


def _empty(value: Any) -> bool:
    return isinstance(value, dict | list) and not value


def _double_quoted(node: yaml.Node) -> bool:
    if isinstance(node, yaml.ScalarNode):
        return node.style == '"'
    items = node.value if isinstance(node, yaml.SequenceNode) else []
    return any(isinstance(i, yaml.ScalarNode) and i.style == '"' for i in items)


def _scalar(value: Any, quoted: bool) -> str:
    if quoted and isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10**9)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def _flow(value: Any, quoted: bool, column: int, width: int) -> str:
    """``value`` in flow style; a list of strings wrapped to ``width`` with its items aligned."""
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        parts = [_scalar(v, quoted) for v in value]
        lines, line = [], "["
        for i, part in enumerate(parts):
            piece = part + ("]" if i == len(parts) - 1 else ",")
            if len(line) > 1 and column + len(line) + 1 + len(piece) > width:
                lines.append(line)
                line = " " * (column + 1) + piece
            else:
                line += ("" if len(line) == 1 or line.endswith("[") else " ") + piece
        return "\n".join([*lines, line])
    return _scalar(value, quoted)


def _block(value: Any, width: int) -> str:
    """``value`` in block style (lists of plain values in flow style, as authors write phrase lists)."""
    return yaml.safe_dump(
        value, sort_keys=False, allow_unicode=True, default_flow_style=None, width=max(40, width)
    ).rstrip("\n")
