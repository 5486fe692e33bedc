"""Editing a YAML file's text value by value: how ``envs.gui.lossless`` saves a rubric.

``splice(source, old, new)`` walks the file's node tree (PyYAML's, whose marks give every node's span in
the text) beside the data the file loads as (``old``) and the data to save (``new``), and rewrites the text
of what differs and nothing else:

- a mapping: changed values are recursed into, a removed key's lines deleted, an added key appended in its
  siblings' block style;
- the requirements (a list of named mappings): paired by name, a renamed one with the unpaired old one in
  its place, a deleted one's lines removed, a new one appended;
- a list of plain values (a phrase list): item by item, paired by ``difflib``, so unchanged items keep
  their text, quoting, line breaks and comments; a new or changed item is written in its neighbour's
  quoting (``envs.gui.yaml_text.item``);
- a folded question: the author's lines whose words stay are kept, the words between re-wrapped at the
  block's own width;
- any other value: rewritten in the style of the text it replaces.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

import yaml

from envs.gui import yaml_text

_MISSING = object()


class Unsupported(Exception):
    """A change this module cannot place in the text (the caller re-dumps)."""


@dataclass(frozen=True)
class _Edit:
    start: int
    end: int
    text: str


def splice(source: str, old: Any, new: Any) -> str:
    """``source`` (which loads as ``old``) with the text of every value that differs in ``new`` rewritten
    (``Unsupported`` when a change cannot be placed)."""
    loader = yaml.SafeLoader(source)
    try:
        node = loader.get_single_node()
    finally:
        loader.dispose()
    if node is None:
        raise Unsupported("the file is empty")
    edits: list[_Edit] = []
    _Splicer(source, loader, edits).merge(node, old, new)
    out = source
    last = len(source) + 1
    for edit in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        if edit.end > last:
            raise Unsupported("overlapping edits")
        out = out[: edit.start] + edit.text + out[edit.end :]
        last = edit.start
    return out


class _Splicer:
    """Walks the file's node tree beside the old and new documents and records text edits."""

    def __init__(self, text: str, loader: yaml.SafeLoader, edits: list[_Edit]) -> None:
        self.text = text
        self.loader = loader
        self.edits = edits
        self.width = yaml_text.usual_width(text)

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

    def line_end(self, index: int) -> int:
        """Just past the end of the line holding ``index`` (its newline included)."""
        stop = self.text.find("\n", index)
        return len(self.text) if stop < 0 else stop + 1

    def dash(self, node: yaml.Node) -> int:
        """Where the ``-`` of a block list item is (-1 when something else comes first on its line)."""
        start = self.line_start(node.start_mark.index)
        before = self.text[start : node.start_mark.index]
        return start + before.index("-") if before.strip() == "-" else -1

    def key_value(self, key: yaml.Node) -> Any:
        try:
            return self.loader.construct_object(key, deep=True)
        except yaml.YAMLError as exc:
            raise Unsupported(f"key at line {key.start_mark.line + 1}") from exc

    def remove_lines(self, first: yaml.Node, last: yaml.Node, item: bool) -> None:
        """Delete the whole lines from ``first``'s to ``last``'s: ``first`` must start its line, after the
        dash when it is a list ``item``."""
        start = self.line_start(first.start_mark.index)
        if self.text[start : first.start_mark.index].strip() != ("-" if item else ""):
            raise Unsupported(f"a removed entry shares line {first.start_mark.line + 1}")
        self.edits.append(_Edit(start, self.line_end(self.end(last)), ""))

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
            elif old and new and _plain_items(node, old, new):
                self.merge_items(node, old, new)
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
                self.remove_lines(key_node, value_node, item=False)
        added = {
            k: v for k, v in new.items() if _hashable(k) not in present and not _same(old.get(k, _MISSING), v)
        }
        if added:
            first = node.value[0][0] if node.value else None
            if first is None:
                raise Unsupported("an empty mapping")
            column = first.start_mark.column
            lines = yaml_text.block(added, self.width - column).splitlines()
            self.insert_after(node, column, lines)

    def merge_named(
        self, node: yaml.SequenceNode, old: list[dict[str, Any]], new: list[dict[str, Any]]
    ) -> None:
        """Requirements: paired by name (a renamed one with the unpaired old one in its place)."""
        if node.flow_style or len(node.value) != len(old):
            self.replace(node, new)
            return
        pairs = _pair_by_name([o.get("name") for o in old], [n["name"] for n in new])
        for i, j in pairs.items():
            self.merge(node.value[j], old[j], new[i])
        for j in set(range(len(old))) - set(pairs.values()):
            self.remove_lines(node.value[j], node.value[j], item=True)
        fresh = [new[i] for i in range(len(new)) if i not in pairs]
        if fresh:
            dash = self.dash(node.value[0])
            if dash < 0:
                raise Unsupported("no dash before the first item")
            column = dash - self.line_start(dash)
            lines = [""]
            for item in fresh:
                body = yaml_text.block(item, self.width - column - 2).splitlines()
                lines += ["- " + body[0], *("  " + line for line in body[1:]), ""]
            self.insert_after(node, column, lines[:-1])

    def merge_items(self, node: yaml.SequenceNode, old: list[Any], new: list[Any]) -> None:
        """A list of plain values, item by item: unchanged items keep their text (quoting, line breaks and
        comments included); a changed or new item is written like its neighbour."""
        items: list[yaml.ScalarNode] = node.value
        flow = bool(node.flow_style)
        if not flow and any(self.dash(i) < 0 for i in items):
            raise Unsupported(f"a list item shares its line (line {node.start_mark.line + 1})")
        keys = difflib.SequenceMatcher(None, [_key(v) for v in old], [_key(v) for v in new], autojunk=False)
        for tag, i1, i2, j1, j2 in keys.get_opcodes():
            if tag == "equal":
                continue
            shared = min(i2 - i1, j2 - j1)
            for k in range(shared):
                item = items[i1 + k]
                text = yaml_text.item(new[j1 + k], item, flow)
                self.edits.append(_Edit(item.start_mark.index, item.end_mark.index, text))
            if i2 - i1 > shared:
                self.delete_items(items, i1 + shared, i2, flow)
            if j2 - j1 > shared:
                self.insert_items(items, i1 + shared, new[j1 + shared : j2], flow)

    def delete_items(self, items: list[yaml.ScalarNode], a: int, b: int, flow: bool) -> None:
        if not flow:
            self.remove_lines(items[a], items[b - 1], item=True)
        elif b < len(items):  # up to the next item: the deleted items' separators and line ends go too
            self.edits.append(_Edit(items[a].start_mark.index, items[b].start_mark.index, ""))
        elif a > 0:  # the tail: from the end of the last item kept
            self.edits.append(_Edit(items[a - 1].end_mark.index, items[b - 1].end_mark.index, ""))
        else:
            raise Unsupported("every item deleted")

    def insert_items(self, items: list[yaml.ScalarNode], at: int, values: list[Any], flow: bool) -> None:
        like = items[at - 1] if at > 0 else items[0]
        texts = [yaml_text.item(v, like, flow) for v in values]
        if not flow:
            dash = self.dash(items[0])
            indent = " " * (dash - self.line_start(dash))
            if at == 0:
                where = self.line_start(dash)
                self.edits.append(_Edit(where, where, "".join(f"{indent}- {t}\n" for t in texts)))
            else:
                where = items[at - 1].end_mark.index
                self.edits.append(_Edit(where, where, "".join(f"\n{indent}- {t}" for t in texts)))
            return
        if at == 0:
            where = items[0].start_mark.index
            self.edits.append(_Edit(where, where, "".join(f"{t}, " for t in texts)))
            return
        where = items[at - 1].end_mark.index
        column = where - self.line_start(where)
        align = " " * items[0].start_mark.column
        closing = 1 if at == len(items) else 0  # the "]" after the last item
        pieces = []
        for i, text in enumerate(texts):
            more = 1 if i < len(texts) - 1 else closing
            if column + 2 + len(text) + more > self.width:
                pieces.append(f",\n{align}{text}")
                column = len(align) + len(text)
            else:
                pieces.append(f", {text}")
                column += 2 + len(text)
        self.edits.append(_Edit(where, where, "".join(pieces)))

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
            quoted = yaml_text.double_quoted(node)
            self.edits.append(_Edit(start, stop, yaml_text.flow(value, quoted, column, self.width)))
        else:
            indent = " " * column
            if isinstance(node, yaml.SequenceNode) and all(not isinstance(v, dict | list) for v in value):
                lines = ["- " + yaml_text.scalar(v, yaml_text.double_quoted(node)) for v in value]
            else:
                lines = yaml_text.block(value, self.width - column).splitlines()
            self.edits.append(_Edit(start, stop, "\n".join([lines[0], *(indent + ln for ln in lines[1:])])))

    def block_scalar(self, node: yaml.ScalarNode, value: str) -> str:
        body_at = self.text.find("\n", node.start_mark.index) + 1
        body = self.text[body_at : self.end(node)].split("\n")
        indent = " " * (len(body[0]) - len(body[0].lstrip(" ")))
        if not indent or not value.strip() or value != value.strip() or "  " in value:
            return yaml_text.flow(value, True, node.start_mark.column, self.width)
        if node.style == "|":
            return "|-\n" + "\n".join(indent + ln if ln else "" for ln in value.split("\n"))
        old_lines = [line.strip() for line in body]
        if "\n" in value or not all(old_lines):
            return yaml_text.flow(value, True, node.start_mark.column, self.width)
        header = self.text[node.start_mark.index : body_at - 1]
        width = max(len(line.rstrip()) for line in body) if len(body) > 1 else self.width
        lines = yaml_text.rewrap(old_lines, value, width - len(indent))
        return (header if header.startswith(">-") else ">-") + "".join("\n" + indent + ln for ln in lines)


def _pair_by_name(old_names: list[Any], new_names: list[Any]) -> dict[int, int]:
    """New position -> old position of the requirements that stay (``Unsupported`` when they were
    reordered, or a new one comes before the last kept one)."""
    pairs = {i: old_names.index(n) for i, n in enumerate(new_names) if n in old_names}
    for i in range(len(new_names)):  # a renamed one takes the unpaired old one between its neighbours
        if i in pairs:
            continue
        lo = max((pairs[k] for k in pairs if k < i), default=-1)
        hi = min((pairs[k] for k in pairs if k > i), default=len(old_names))
        taken = set(pairs.values())
        spare = [j for j in range(lo + 1, hi) if j not in taken]
        if spare:
            pairs[i] = spare[0]
    order = [pairs[i] for i in sorted(pairs)]
    fresh_at = [i for i in range(len(new_names)) if i not in pairs]
    if order != sorted(order) or (fresh_at and pairs and min(fresh_at) < max(pairs)):
        raise Unsupported("requirements were reordered or inserted before the last one")
    return pairs


def _plain_items(node: yaml.SequenceNode, old: list[Any], new: list[Any]) -> bool:
    """Whether the node is a list of scalars, one per item of ``old``, and ``new`` holds scalars too."""
    return (
        len(node.value) == len(old)
        and all(isinstance(i, yaml.ScalarNode) and i.style not in (">", "|") for i in node.value)
        and not any(isinstance(v, dict | list) for v in [*old, *new])
    )


def _key(value: Any) -> str:
    """What pairs list items: the value with its type (so 1 and "1" differ)."""
    return f"{type(value).__name__}:{value!r}"


def _same(a: Any, b: Any) -> bool:
    return (type(a) is type(b) and a == b) or (
        isinstance(a, int | float) and isinstance(b, int | float) and a == b
    )


def _hashable(key: Any) -> Any:
    return key if isinstance(key, str | int | float | bool) or key is None else repr(key)


def _empty(value: Any) -> bool:
    return isinstance(value, dict | list) and not value
