"""How every loader writes a message, so a user learns one shape::

    FILE:LINE: where.in.the.document: what is wrong (expected X, got Y)

- ``LINE`` and ``where`` are left out when unknown. ``where`` is written by ``field_path``:
  ``requirements[2].options[0].value``, ``answers.scene_safety``, ``dependencies[1.0]``.
- ``what is wrong`` is ours, never Python's (no "'int' object is not iterable"): say what the field must be
  and show what was given with ``show`` (``'low'``, ``true``, ``the date 2024-01-01``, ``a list [1, 2]``), so
  a date or a number used as a name reads as the user wrote it, never as ``datetime.date(2024, 1, 1)``.
- Schema checks are pydantic models; ``schema_problem`` words one pydantic error this way
  (``rubrics.loading.schema_error`` adds the file, the line and the place).
- The library raises ``rubrics.loading.FileLoadError`` (a ``ValueError``) or a subclass; the CLI prints it
  without a traceback and exits 2.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from typing import Any

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def show(value: Any, limit: int = 60) -> str:
    """A value as the user wrote it, for "got Y": ``'low'``, ``3``, ``true``, ``the date 2024-01-01``,
    ``a list ['a', 'b']``, ``a mapping {x: 1}``, ``nothing`` (an empty YAML value)."""
    if value is None:
        return "nothing"
    if isinstance(value, datetime.date):
        return f"the date {value.isoformat()}"
    text = _plain(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    if isinstance(value, Mapping):
        return f"a mapping {text}"
    if isinstance(value, list | tuple):
        return f"a list {text}"
    return text


def field_path(where: Sequence[Any]) -> str:
    """``("requirements", 2, "options", 0)`` -> ``requirements[2].options[0]``; keys that are not
    identifiers are bracketed as written: ``dependencies[1.0]``, ``answers['my key']``."""
    out = ""
    for part in where:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        elif isinstance(part, str) and _IDENTIFIER.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{_plain(part)}]"
    return out


def _plain(value: Any) -> str:
    """Short YAML-like text of a value (dates as ISO dates, not ``datetime.date(...)``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_plain(k)}: {_plain(v)}" for k, v in list(value.items())[:8]) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_plain(v) for v in list(value)[:8]) + ("]" if len(value) <= 8 else ", ...]")
    return str(value)


_EXPECTED = {
    "string_type": "a string",
    "float_type": "a number",
    "float_parsing": "a number",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "tuple_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "finite_number": "a finite number",
}


_BOUNDS = {
    "greater_than": ("gt", ">"),
    "greater_than_equal": ("ge", ">="),
    "less_than": ("lt", "<"),
    "less_than_equal": ("le", "<="),
}


def schema_problem(error: Mapping[str, Any], fields: Sequence[str] = ()) -> str:
    """One pydantic error as "what is wrong (expected X, got Y)"; ``fields``: the allowed field names,
    listed when the error is an unknown field."""
    kind, ctx, given = error["type"], error.get("ctx") or {}, show(error.get("input"))
    if kind == "missing":
        return "is missing"
    if kind == "extra_forbidden":
        return "unknown field" + (f" (allowed: {', '.join(fields)})" if fields else "")
    if kind in _EXPECTED:
        return f"wrong type (expected {_EXPECTED[kind]}, got {given})"
    if kind == "literal_error":
        return f"not allowed (expected one of {ctx.get('expected')}, got {given})"
    if kind in _BOUNDS:
        key, sign = _BOUNDS[kind]
        return f"out of range (expected a number {sign} {ctx.get(key):g}, got {given})"
    if kind == "string_too_short" and ctx.get("min_length") == 1:
        return f"is empty (expected a non-empty string, got {given})"
    if kind in ("too_short", "string_too_short"):
        least = ctx.get("min_length", 1)
        unit = "character" if kind == "string_too_short" else "item"
        return f"too short (expected at least {least} {unit}{'s' if least != 1 else ''}, got {given})"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return f"{error['msg'][0].lower()}{error['msg'][1:]} (got {given})"
