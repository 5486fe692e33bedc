"""Reading the files users hand us: bytes to text, text to YAML or JSON, with errors that name the place.

Every loader of the project (rubrics, scenarios, criteria, run configs) reads through here, so they answer
bad input the same way. The message style, used by every loader::

    FILE:LINE: where.in.the.document: what is wrong (expected X, got Y)

(``LINE`` and the document path when they are known). ``FileLoadError`` carries the file, line and field;
it is a ``ValueError``, so callers that catch ``ValueError`` keep working.

- **Text** is UTF-8; a UTF-8 byte-order mark is accepted and dropped. Anything else (Latin-1, UTF-16) is an
  error naming the byte offset where decoding failed.
- **YAML** is parsed with PyYAML's safe loader (no Python object is built from a tag), plus:
  a key repeated in one mapping is an error naming both lines (the last one would silently win, which is
  how a user loses a branch); ``1e-3`` is a number (YAML 1.1 reads a float without a dot as a string);
  nesting deeper than ``MAX_DEPTH`` and alias expansions beyond ``MAX_ALIAS_NODES`` nodes (a "billion
  laughs" file) are refused before anything walks the document; so are characters YAML forbids (a NUL
  byte), named with their line, and the ``!!set``, ``!!omap`` and ``!!pairs`` tags (no file of this project
  holds a set: a list written as ``!!set {a, b}`` would lose its order and pass for a list).
  ``parse_yaml_document`` also returns the line of every key and item, so later checks can name the line of
  the field they refuse.

How to write a message: see ``rubrics.error_text`` (``show``, ``field_path``, ``schema_problem``);
``schema_error`` turns the first failure of a pydantic schema check into that shape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from rubrics.error_text import field_path, schema_problem, show

MAX_DEPTH = 100
"""Deepest nesting of mappings and lists a file may have."""
MAX_ALIAS_NODES = 100_000
"""Most nodes that aliases (``*name``) may expand to in one document."""

_SCIENTIFIC = re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


class FileLoadError(ValueError):
    """A file cannot be read as what it should be; ``str()`` is ``FILE[:LINE]: [field: ]reason``."""

    def __init__(
        self, file: str | Path, reason: str, line: int | None = None, field: str | None = None
    ) -> None:
        self.file = str(file)
        """The file (or ``<string>``)."""
        self.line = line
        """1-based line, when known."""
        self.field = field
        """Where in the document (``requirements[2].dependencies``), when known."""
        self.reason = reason
        """What is wrong."""
        where = f"{self.file}:{line}" if line is not None else self.file
        super().__init__(f"{where}: {field}: {reason}" if field else f"{where}: {reason}")


def read_text(path: str | Path) -> str:
    """The file's text, decoded as UTF-8 (a UTF-8 byte-order mark is dropped)."""
    p = Path(path)
    if not p.is_file():
        raise FileLoadError(p, "file not found")
    data = p.read_bytes()
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise FileLoadError(
            p, "the file is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise FileLoadError(
            p,
            f"not UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start} ({exc.reason}); save it as UTF-8",
            line,
        ) from None


class _StrictLoader(yaml.SafeLoader):
    """The safe loader, refusing duplicate keys, deep nesting and alias bombs; ``1e-3`` is a float."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._alias_nodes = 0
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        mark: Any = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            self._alias_nodes += _size(node)
            if self._alias_nodes > MAX_ALIAS_NODES:
                raise yaml.composer.ComposerError(
                    None, None, f"aliases expand to more than {MAX_ALIAS_NODES:,} nodes", mark
                )
            return node
        if self._depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"a key must be a plain value such as a name, not {show(key)}",
                    key_node.start_mark,
                ) from None
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {first})", key_node.start_mark
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _size(node: Any, seen: dict[int, int] | None = None) -> int:
    """How many nodes ``node`` stands for once every alias inside it is expanded."""
    seen = {} if seen is None else seen
    if id(node) in seen:
        return seen[id(node)]
    total = 1
    if isinstance(node, yaml.SequenceNode):
        total += sum(_size(child, seen) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        total += sum(_size(k, seen) + _size(v, seen) for k, v in node.value)
    seen[id(node)] = total
    return total


_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", _SCIENTIFIC, list("-+0123456789"))


class _RefusedTag(yaml.constructor.ConstructorError):
    """A tag the strict loader does not build (the YAML is valid; the file is still refused)."""


def _refuse(written_as: str) -> Any:
    """A constructor that refuses its tag, saying what to write instead."""

    def construct(loader: _StrictLoader, node: Any) -> Any:
        tag = "!!" + node.tag.rsplit(":", 1)[-1]
        raise _RefusedTag(None, None, f"a {tag} is not allowed here (write {written_as})", node.start_mark)

    return construct


for _tag, _written_as in (("set", "a list: [a, b]"), ("omap", "a mapping"), ("pairs", "a mapping")):
    _StrictLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse(_written_as))


E = TypeVar("E", bound=FileLoadError)

Place = tuple[Any, ...]
"""A place in a parsed document: the keys and indices from the top (``("requirements", 2, "name")``)."""


@dataclass
class Document:
    """A parsed file with the line of each key and item, for messages that point at the line."""

    data: Any
    """The parsed document."""
    file: str
    """Where it came from."""
    lines: dict[Place, int] = field(default_factory=dict)
    """1-based line of each place (a mapping entry's key line); empty for JSON."""

    def line(self, where: Sequence[Any]) -> int | None:
        """The line of ``where``, or of its nearest enclosing place that has one."""
        parts = tuple(where)
        for end in range(len(parts), -1, -1):
            try:
                line = self.lines.get(parts[:end])
            except TypeError:  # an unhashable part (a list used as a key)
                continue
            if line is not None:
                return line
        return None

    def error(self, where: Sequence[Any], reason: str, cls: type[E]) -> E:
        """A ``cls`` error (``FileLoadError`` or a subclass) at ``where``, with its line."""
        return cls(self.file, reason, self.line(where), field_path(where) or None)


def parse_yaml_document(text: str, source: str | Path = "<string>") -> Document:
    """One YAML document, strictly (see the module docstring), with the line of every key and item."""
    try:
        loader = _StrictLoader(text)
    except yaml.reader.ReaderError as exc:  # a character YAML forbids, found before parsing starts
        raise _reader_error(exc, text, source) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return Document(None, str(source))
        data = loader.construct_document(node)
        return Document(data, str(source), _line_map(loader, node))
    except _RefusedTag as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark is not None else None
        raise FileLoadError(source, str(exc.problem), line) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        reason = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        raise FileLoadError(source, f"not valid YAML: {reason}", line) from None
    except yaml.reader.ReaderError as exc:
        raise _reader_error(exc, text, source) from None
    except yaml.YAMLError as exc:
        raise FileLoadError(source, f"not valid YAML: {exc}") from None
    except RecursionError:
        raise FileLoadError(
            source, f"not valid YAML: nested too deeply (more than {MAX_DEPTH} levels)"
        ) from None
    finally:
        loader.dispose()


def _reader_error(exc: yaml.reader.ReaderError, text: str, source: str | Path) -> FileLoadError:
    """A character YAML forbids, with its line and column."""
    before = text[: exc.position]
    line, column = before.count("\n") + 1, exc.position - (before.rfind("\n") + 1) + 1
    name = "a NUL byte" if exc.character == 0 else f"the control character U+{exc.character:04X}"
    return FileLoadError(
        source, f"not valid YAML: {name} at column {column} (YAML does not allow it in a file)", line
    )


def parse_yaml(text: str, source: str | Path = "<string>") -> Any:
    """One YAML document, strictly (see the module docstring); errors name ``source`` and the line."""
    return parse_yaml_document(text, source).data


def _line_map(loader: _StrictLoader, root: Any) -> dict[Place, int]:
    """The line of every place under ``root`` (a node shared through aliases is mapped once)."""
    lines: dict[Place, int] = {}
    stack: list[tuple[Place, Any]] = [((), root)]
    seen: set[int] = set()
    while stack:
        where, node = stack.pop()
        lines.setdefault(where, node.start_mark.line + 1)
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend(((*where, i), child) for i, child in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            for key_node, value in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    continue  # a list or mapping used as a key: the schema refuses it
                place = (*where, loader.construct_object(key_node))
                lines.setdefault(place, key_node.start_mark.line + 1)
                stack.append((place, value))
    return lines


def parse_json(text: str, source: str | Path = "<string>") -> Any:
    """One JSON document; errors name ``source``, the line and the column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FileLoadError(source, f"not valid JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
    except RecursionError:
        raise FileLoadError(source, "not valid JSON: nested too deeply") from None


def parse_jsonl(path: str | Path) -> list[tuple[int, Any]]:
    """Each non-blank line of a JSONL file as ``(line number, parsed value)``; errors name the file and the
    line (``read_text``'s and ``parse_json``'s reasons)."""
    entries = []
    for lineno, line in enumerate(read_text(path).splitlines(), start=1):
        if line.strip():
            try:
                entries.append((lineno, parse_json(line, path)))
            except FileLoadError as exc:
                raise FileLoadError(path, exc.reason, lineno) from None
    return entries


def load_yaml_file(path: str | Path) -> Any:
    """``parse_yaml(read_text(path))``."""
    return parse_yaml(read_text(path), path)


def load_yaml_document(path: str | Path) -> Document:
    """``parse_yaml_document(read_text(path))``."""
    return parse_yaml_document(read_text(path), path)


# -- schema errors ----------------------------------------------------------------------------------


def schema_error(
    exc: ValidationError,
    doc: Document,
    where: Sequence[Any],
    model: type[BaseModel] | None,
    cls: type[E],
) -> E:
    """The first failure of a pydantic validation of the part of ``doc`` at ``where``, as a ``cls`` error
    naming the line and the field path (and how many more failures there were)."""
    errors = exc.errors()
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    first = (unknown or errors)[0]  # a misspelt field explains the "missing" one it was meant to be
    loc = _real_keys(doc.data, where, [part for part in first["loc"] if part != "[key]"])
    fields = list(model.model_fields) if model is not None and len(loc) == 1 else []
    reason = schema_problem(first, fields)
    if len(errors) > 1:
        reason += f" (and {len(errors) - 1} more problem(s) in this entry)"
    return doc.error((*where, *loc), reason, cls)


def _real_keys(data: Any, where: Sequence[Any], loc: Sequence[Any]) -> list[Any]:
    """pydantic writes a mapping key that is not a string or an integer (``1.0``, a date) as its text; put
    the key back, so that the field path and the line are those of the file."""
    for part in where:
        data = _child(data, part)
    out = []
    for part in loc:
        if isinstance(data, Mapping) and part not in data:
            part = next((key for key in data if str(key) == str(part)), part)
        out.append(part)
        data = _child(data, part)
    return out


def _child(data: Any, part: Any) -> Any:
    try:
        return data[part]
    except (KeyError, IndexError, TypeError):
        return None
