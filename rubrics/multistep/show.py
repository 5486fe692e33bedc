"""Human-readable views of a multi-step rubric: levels, branches and paths as text, and an SVG drawing."""

from __future__ import annotations

from html import escape

from rubrics.multistep.rubric import MultiStepRubric


def _fmt(key: object) -> str:
    return f"{key:g}" if isinstance(key, float) else str(key)


def describe(rubric: MultiStepRubric, max_paths: int = 50) -> str:
    """Levels, branches and root-to-terminal paths as text."""
    graph = rubric.graph
    lines = [
        f"rubric {rubric.name or '(unnamed)'}: {len(graph.requirements)} requirements, {graph.depth} levels, "
        f"roots {', '.join(graph.roots)}; judges {', '.join(rubric.judges)} (default {rubric.default_judge}); "
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
    if graph.unreachable:
        lines += ["", f"warning: unreachable from the roots: {', '.join(graph.unreachable)}"]
    return "\n".join(lines)


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
            f'<text x="{x + box_w / 2:.0f}" y="{y + box_h / 2 + 4:.0f}" text-anchor="middle">{escape(label)}</text></g>'
        )
    out.append("</svg>")
    return "\n".join(out)
