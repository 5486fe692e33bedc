"""The DAG drawing with edges labelled by answer *names* ("1 yes", "2: full outage"), not bare values.

The library's ``to_svg`` labels each edge with the answer values that unlock it. This module rewrites those
labels with the option names the rubric gives them (yes/no, a discrete option's meaning, a unit-vector
label), shortened to fit. It rewrites a label only where the drawing holds exactly the value text it
expects, edge by edge in the library's drawing order; if the drawing does not match (a changed ``to_svg``),
the plain drawing is returned unchanged rather than a mislabelled one.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

from envs.gui import editor
from envs.gui.document import Doc, find
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.show import to_svg

MAX_LABEL = 26
"""Longest edge label drawn (longer names end in an ellipsis)."""
_EDGE_LABEL = re.compile(r'(<text x="-?\d+" y="-?\d+" fill="#[0-9a-fA-F]{6}">)([^<]*)(</text>)')


def answer_names(req: dict[str, Any]) -> dict[float, str]:
    """Answer value -> how the editor names it (``1 (yes)``, ``2: full outage``) for one requirement."""
    try:
        return {float(s.value): s.label for s in editor.slots(editor.fields_from_requirement(req))}
    except (editor.FieldError, ValueError):
        return {}


def edge_labels(rubric: MultiStepRubric, doc: Doc) -> list[tuple[str, str]]:
    """(value text, name text) of every edge label, in ``to_svg``'s drawing order."""
    out = []
    for req in rubric.graph.requirements.values():
        try:
            names = answer_names(find(doc, req.name))
        except KeyError:
            names = {}
        edges: dict[str, list[Any]] = {}
        for key, children in req.dependencies.items():
            for child in children:
                edges.setdefault(child, []).append(key)
        for keys in edges.values():
            values = ",".join(f"{k:g}" if isinstance(k, float) else str(k) for k in keys)
            if len(keys) > 1 and len(keys) == len(names):
                named = "any answer"
            else:
                width = MAX_LABEL if len(keys) == 1 else 14
                named = ", ".join(_short(names.get(float(k), editor.fmt(k)), width) for k in keys)
            out.append((values, named))
    return out


def labelled_svg(rubric: MultiStepRubric, doc: Doc) -> str:
    """``to_svg(rubric)`` with each edge labelled by the names of the answers that unlock it."""
    svg = to_svg(rubric)
    expected = edge_labels(rubric, doc)
    found = list(_EDGE_LABEL.finditer(svg))
    if len(found) != len(expected) or any(
        m.group(2) != escape(v) for m, (v, _) in zip(found, expected, strict=True)
    ):
        return svg
    pieces, last = [], 0
    for match, (_, named) in zip(found, expected, strict=True):
        pieces += [svg[last : match.start(2)], escape(named)]
        last = match.end(2)
    return "".join([*pieces, svg[last:]])


def _short(label: str, width: int) -> str:
    label = label.replace(" (", " ").replace(")", "") if label.endswith(")") else label
    return label if len(label) <= width else label[: width - 1] + "…"
