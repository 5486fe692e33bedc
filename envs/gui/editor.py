"""One requirement as form fields and back: what the requirement editor shows and what it applies.

Fields are plain strings and lists, keyed like the editor's widgets: ``name``, ``type``, ``question``,
``judge`` ("" for the rubric's default), the type's own ``options`` ("value: meaning" per line), ``low``,
``high``, ``tolerance``, ``labels`` (one per line), ``keys`` (continuous branch values), and per answer value
(a *slot*) ``dep_<slot>`` (names it unlocks) and ``rule_<slot>_<kind>`` for each rule key of the library
(``any``, ``all``, ``none``, ``regex``, ...). Dependencies are picked from existing names per answer value,
never typed as data. ``requirement_from_fields`` of ``fields_from_requirement(r)`` equals ``r`` (empty
branches and empty rules left out, as the library does); ``keep_empty_branches`` puts back the empty branches
(``0.0: []``) of a requirement whose edit left them alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rubrics.judges.matching import RULE_KEYS

REQUIREMENT_KINDS = ("binary", "discrete", "continuous", "unit_vector")
"""Requirement types, in the order the editor offers them."""
RULE_KINDS = tuple(k for k in RULE_KEYS if k != "regex")
"""Phrase lists of a rule spec, as the library defines them (one phrase per line in the editor); ``regex``
is one pattern, which its box may show over several lines (``join_regex``)."""


@dataclass(frozen=True)
class Slot:
    """One answer value a requirement can branch on."""

    key: str
    """Widget-safe identifier of the value (``1``, ``0_5``, ``m1``)."""
    value: float | int
    """The answer value (a label index for unit-vector requirements)."""
    label: str
    """How the editor names it (``1 (yes)``, ``2: full outage``)."""


class FieldError(ValueError):
    """A form field does not parse; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        """The offending field."""


def fmt(value: Any) -> str:
    """A number as the editor writes it: ``1`` for 1.0, ``0.25``, full precision otherwise."""
    number = float(value)
    return str(int(number)) if number.is_integer() else repr(number)


def slot_key(value: Any) -> str:
    """Widget-safe identifier of an answer value."""
    return fmt(value).replace(".", "_").replace("-", "m").replace("+", "")


def slots(fields: dict[str, Any]) -> list[Slot]:
    """The answer values of the requirement described by ``fields`` (``FieldError`` when the type's own
    fields do not parse)."""
    kind = fields.get("type", "binary")
    if kind == "binary":
        return [Slot("1", 1.0, "1 (yes)"), Slot("0", 0.0, "0 (no)")]
    if kind == "discrete":
        return [Slot(slot_key(v), v, f"{fmt(v)}: {m}" if m else fmt(v)) for v, m in parse_options(fields)]
    if kind == "unit_vector":
        return [Slot(str(i), i, f"{i}: {label}") for i, label in enumerate(parse_lines(fields.get("labels")))]
    return [Slot(slot_key(v), v, fmt(v)) for v in parse_numbers("keys", fields.get("keys", ""))]


def parse_lines(text: Any) -> list[str]:
    """Non-empty lines, stripped."""
    return [line.strip() for line in str(text or "").splitlines() if line.strip()]


def parse_numbers(field: str, text: str) -> list[float]:
    """Numbers separated by commas or spaces, in order, without repeats."""
    out: list[float] = []
    for part in str(text or "").replace(",", " ").split():
        try:
            number = float(part)
        except ValueError:
            raise FieldError(field, f"{part!r} is not a number") from None
        if number not in out:
            out.append(number)
    return out


def parse_options(fields: dict[str, Any]) -> list[tuple[float, str]]:
    """Discrete options from ``value: meaning`` lines."""
    out: list[tuple[float, str]] = []
    for line in parse_lines(fields.get("options")):
        value, _, meaning = line.partition(":")
        try:
            out.append((float(value.strip()), meaning.strip()))
        except ValueError:
            raise FieldError("options", f"option line {line!r} must read 'value: meaning'") from None
    return out


def fields_from_requirement(req: dict[str, Any]) -> dict[str, Any]:
    """The editor's fields for one requirement (plain data as ``requirement_to_dict`` writes it)."""
    kind = req.get("type", "binary")
    fields: dict[str, Any] = {
        "name": str(req.get("name", "")),
        "type": kind,
        "question": str(req.get("question", "")),
        "judge": str(req.get("judge") or ""),
        "options": "",
        "low": 0.0,
        "high": 1.0,
        "tolerance": 0.1,
        "labels": "",
        "keys": "",
    }
    deps: dict[Any, list[str]] = dict(req.get("dependencies") or {})
    rules: dict[Any, dict[str, Any]] = dict(req.get("rules") or {})
    if kind == "discrete":
        options = req.get("options") or []
        if isinstance(options, dict):
            options = [{"value": k, "meaning": v} for k, v in options.items()]
        fields["options"] = "\n".join(
            f"{fmt(o['value'])}: {o.get('meaning', '')}".rstrip() if isinstance(o, dict) else fmt(o)
            for o in options
        )
    elif kind == "continuous":
        for key in ("low", "high", "tolerance"):
            if key in req:
                fields[key] = float(req[key])
        fields["keys"] = ", ".join(fmt(k) for k in _unique([*deps, *rules]))
    elif kind == "unit_vector":
        fields["labels"] = "\n".join(str(label) for label in req.get("labels") or [])
    for key, children in deps.items():
        fields[f"dep_{slot_key(key)}"] = list(children or [])
    for key, spec in rules.items():
        for rule_kind in RULE_KINDS:
            fields[f"rule_{slot_key(key)}_{rule_kind}"] = "\n".join(spec.get(rule_kind) or [])
        fields[f"rule_{slot_key(key)}_regex"] = str(spec.get("regex") or "")
        fields[f"rule_{slot_key(key)}_negation_aware"] = bool(spec.get("negation_aware", True))
    return fields


def requirement_from_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """Plain data for the requirement the fields describe (``FieldError`` when a field does not parse;
    everything else is left to the library's validation)."""
    kind = fields.get("type", "binary")
    req: dict[str, Any] = {
        "name": str(fields.get("name", "")).strip(),
        "type": kind,
        "question": str(fields.get("question", "")).strip(),
    }
    if kind == "discrete":
        req["options"] = [{"value": v, "meaning": m} for v, m in parse_options(fields)]
    elif kind == "continuous":
        for key in ("low", "high", "tolerance"):
            req[key] = float(fields.get(key, 0.0))
    elif kind == "unit_vector":
        req["labels"] = parse_lines(fields.get("labels"))
    deps: dict[Any, list[str]] = {}
    rules: dict[Any, dict[str, Any]] = {}
    for slot in slots(fields):
        children = [str(c) for c in fields.get(f"dep_{slot.key}") or []]
        if children:
            deps[slot.value] = children
        spec: dict[str, Any] = {}
        for rule_kind in RULE_KINDS:
            phrases = parse_lines(fields.get(f"rule_{slot.key}_{rule_kind}"))
            if phrases:
                spec[rule_kind] = phrases
        regex = join_regex(fields.get(f"rule_{slot.key}_regex"))
        if regex:
            spec["regex"] = regex
        if spec and fields.get(f"rule_{slot.key}_negation_aware") is False:  # the default (true) is left out
            spec["negation_aware"] = False
        if spec:
            rules[slot.value] = spec
    if deps:
        req["dependencies"] = deps
    if fields.get("judge"):
        req["judge"] = str(fields["judge"])
    if rules:
        req["rules"] = rules
    return req


def keep_empty_branches(
    req: dict[str, Any], before: dict[str, Any], fields: dict[str, Any]
) -> dict[str, Any]:
    """``req`` (from ``fields``) with the empty branches of the requirement it replaces (``0.0: []``, an
    answer that unlocks nothing) where the form still has that answer and it unlocks nothing there: the form
    shows an empty branch and a missing one alike, so an edit elsewhere must not drop the author's."""
    deps: dict[Any, list[str]] = dict(req.get("dependencies") or {})
    answers = [float(s.value) for s in slots(fields)]
    empty = [
        k
        for k, children in (before.get("dependencies") or {}).items()
        if not children and float(k) in answers and float(k) not in [float(d) for d in deps]
    ]
    if not empty:
        return req
    order = {value: i for i, value in enumerate(answers)}
    merged = sorted([*deps.items(), *((k, []) for k in empty)], key=lambda kv: order[float(kv[0])])
    out: dict[str, Any] = {}
    for key, value in req.items():  # in the place requirement_from_fields gives dependencies
        if key in ("dependencies", "judge", "rules") and "dependencies" not in out:
            out["dependencies"] = dict(merged)
        if key != "dependencies":
            out[key] = value
    out.setdefault("dependencies", dict(merged))
    return out


def join_regex(text: Any) -> str:
    """The pattern typed in the multi-line regex box: its lines joined as they are, ends stripped (a long
    pattern may be broken over lines for reading; a line break is never part of it)."""
    return "".join(str(text or "").splitlines()).strip()


def wrap_regex(text: Any, width: int = 100) -> str:
    """How tall the regex box must be: the pattern cut into ``width``-character lines (display only)."""
    pattern = str(text or "")
    return "\n".join(pattern[i : i + width] for i in range(0, max(1, len(pattern)), width))


def regex_problem(text: Any) -> str | None:
    """Why the typed pattern does not compile (None when it does or is blank)."""
    pattern = join_regex(text)
    if not pattern:
        return None
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"the regex does not compile: {exc}"
    return None


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a requirement (None when it can): the library's rule, an identifier."""
    if not name:
        return "a requirement needs a name"
    if not name.isidentifier():
        return f"{name!r} is not a valid name: use letters, digits and _, not starting with a digit"
    return None


def blank_fields() -> dict[str, Any]:
    """The fields of a new binary requirement."""
    return fields_from_requirement({"name": "", "type": "binary", "question": ""})


def _unique(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if float(v) not in [float(o) for o in out]:
            out.append(v)
    return sorted(out, key=float)
