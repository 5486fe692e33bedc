"""Human-readable views of a multi-step rubric: levels, branches and paths as text, and an SVG drawing."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from rubrics.judges.matching import NEGATION_WINDOW, RULE_KEYS, negation_aware
from rubrics.multistep.rubric import MultiStepRubric

RULES_LEGEND = (
    "rules (the judged answer is the first whose rule matches; phrases match whole words with their\n"
    f"inflections; 'negation-aware': a negator up to {NEGATION_WINDOW} words before a phrase in its clause "
    "means it is not said;\n'phrases as written' (negation_aware: false): negators are ignored; a regex "
    "always matches as written):"
)
"""The heading of ``describe``'s rules section: how rule judges read a reply."""


def _fmt(key: object) -> str:
    return f"{key:g}" if isinstance(key, float) else str(key)


def describe(rubric: MultiStepRubric, max_paths: int = 50) -> str:
    """Levels, branches and root-to-terminal paths as text."""
    graph = rubric.graph
    lines = [
        f"rubric {rubric.name or '(unnamed)'}: {len(graph.requirements)} requirements, {graph.depth} levels, "
        f"roots {', '.join(graph.roots)}; judges {', '.join(rubric.judges)} "
        f"(default {rubric.default_judge}); "
        f"reward {rubric.reward_strategy.type}{' (normalised)' if rubric.reward_strategy.normalized else ''}",
        "",
        "levels:",
    ]
    for level, names in enumerate(graph.by_level()):
        lines.append(f"  {level}: {', '.join(names)}")
    lines += ["", "branches:"]
    for req in graph.requirements.values():
        if req.is_terminal:
            lines.append(f"  {req.name} [{req.kind}] -> terminal")
            continue
        parts = [f"{_fmt(k)} -> {', '.join(v) if v else '(end)'}" for k, v in req.dependencies.items()]
        lines.append(f"  {req.name} [{req.kind}]: " + "; ".join(parts))
    paths = graph.paths(limit=max_paths + 1)
    lines += ["", f"paths ({len(paths) if len(paths) <= max_paths else f'more than {max_paths}'}):"]
    for path in paths[:max_paths]:
        lines.append("  " + " -> ".join(path))
    rules = [
        f"  {req.name} = {_fmt(value)}: {describe_rule(spec)}"
        for req in graph.requirements.values()
        for value, spec in req.rules.items()
    ]
    if rules:
        lines += ["", RULES_LEGEND, *rules]
    if graph.unreachable:
        lines += ["", f"warning: unreachable from the roots: {', '.join(graph.unreachable)}"]
    return "\n".join(lines)


def describe_rule(spec: Mapping[str, Any], shown: int = 3, width: int = 60) -> str:
    """One answer's rule on one line: each key with its first ``shown`` phrases, the regex cut at ``width``
    characters, and whether the phrases are negation-aware."""
    parts = []
    for key in RULE_KEYS:
        if key not in spec:
            continue
        if key == "regex":
            pattern = spec[key] if len(spec[key]) <= width else spec[key][: width - 1] + "…"
            parts.append(f"regex /{pattern}/")
            continue
        phrases = ", ".join(repr(p) for p in spec[key][:shown])
        more = f" +{len(spec[key]) - shown} more" if len(spec[key]) > shown else ""
        parts.append(f"{key} {phrases}{more}")
    has_phrases = any(key in spec for key in ("any", "all", "none", "negated"))
    if has_phrases:
        parts.append("negation-aware" if negation_aware(spec) else "phrases as written")
    return "; ".join(parts)


def to_svg(rubric: MultiStepRubric) -> str:
    """A layered drawing of the DAG: one row per level, edges labelled with the answer that unlocks them."""
    graph = rubric.graph
    box_w, box_h, gap_x, gap_y, margin = 190, 34, 24, 70, 20
    rows = graph.by_level()
    width = margin * 2 + max(len(r) for r in rows) * (box_w + gap_x)
    height = margin * 2 + len(rows) * (box_h + gap_y)
    pos: dict[str, tuple[float, float]] = {}
    for level, names in enumerate(rows):
        row_w = len(names) * (box_w + gap_x) - gap_x
        x0 = (width - row_w) / 2
        for i, name in enumerate(names):
            pos[name] = (x0 + i * (box_w + gap_x), margin + level * (box_h + gap_y))
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        'font-family="sans-serif" font-size="11">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    palette = ["#1b7837", "#b2182b", "#2166ac", "#555555"]
    for req in graph.requirements.values():
        x, y = pos[req.name]
        edges: dict[str, list[int]] = {}  # child -> indices of the answers that unlock it (one line per pair)
        for index, children in enumerate(req.dependencies.values()):
            for child in children:
                edges.setdefault(child, []).append(index)
        answers = [_fmt(k) for k in req.dependencies]
        for child, indices in edges.items():
            keys = [answers[i] for i in indices]
            color = palette[indices[0] % 3] if len(indices) == 1 else palette[3]  # several answers: grey
            cx, cy = pos[child]
            x1, y1, x2, y2 = x + box_w / 2, y + box_h, cx + box_w / 2, cy
            out.append(
                f'<line x1="{x1:.0f}" y1="{y1:.0f}" x2="{x2:.0f}" y2="{y2:.0f}" stroke="{color}" '
                'stroke-width="1.3" marker-end="url(#arrow)"/>'
            )
            lx, ly = x1 + (x2 - x1) * 0.3, y1 + (y2 - y1) * 0.3
            out.append(f'<text x="{lx:.0f}" y="{ly:.0f}" fill="{color}">{escape(",".join(keys))}</text>')
    for name, (x, y) in pos.items():
        req = graph.requirements[name]
        fill = "#fde0dd" if name in graph.roots else "#e0ecf4" if req.is_terminal else "#f7f7f7"
        label = name if len(name) <= 28 else name[:27] + "…"
        out.append(
            f'<g><title>{escape(req.question)}</title><rect x="{x:.0f}" y="{y:.0f}" width="{box_w}" '
            f'height="{box_h}" rx="6" fill="{fill}" stroke="#333"/>'
            f'<text x="{x + box_w / 2:.0f}" y="{y + box_h / 2 + 4:.0f}" text-anchor="middle">'
            f"{escape(label)}</text></g>"
        )
    out.append("</svg>")
    return "\n".join(out)
