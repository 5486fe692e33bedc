"""The DAG section: the drawing by level with branch labels (``rubrics.multistep.show.to_svg``) and the path
explorer: roots, branching points, terminals, and the root-to-terminal paths (bounded for wide DAGs)."""

from __future__ import annotations

import base64

import pandas as pd
import streamlit as st

from envs.gui import state
from envs.gui.dag_labels import answer_names, labelled_svg
from envs.gui.document import Issue, find
from envs.gui.editor import fmt
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.show import describe


def render() -> None:
    """Draw the section."""
    rubric, issues = state.built()
    st.header("DAG")
    if rubric is None:
        st.error("the rubric is not valid, so it cannot be drawn: " + "; ".join(i.message for i in issues))
        return
    _drawing(rubric, issues)
    _path_explorer(rubric)


def _drawing(rubric: MultiStepRubric, issues: list[Issue]) -> None:
    """The DAG's counts, its drawing by level, and the builder's warnings."""
    graph = rubric.graph
    c = st.columns(5)
    c[0].metric("requirements", len(graph.requirements))
    c[1].metric("levels", graph.depth)
    c[2].metric("roots", len(graph.roots))
    c[3].metric("terminals", sum(1 for r in graph.requirements.values() if r.is_terminal))
    c[4].metric("paths", graph.count_paths())
    svg = labelled_svg(rubric, state.doc())
    data = base64.b64encode(svg.encode()).decode()
    st.markdown(
        f'<div data-testid="rubric-dag" style="overflow-x:auto"><img alt="rubric DAG" '
        f'src="data:image/svg+xml;base64,{data}" style="max-width:none"/></div>',
        unsafe_allow_html=True,
    )
    st.caption(
        "one row per level; roots pink, terminals blue; an edge is labelled with the answer "
        "(its option name) that unlocks it "
        "(green: first answer, red: second, blue: third, grey: several)"
    )
    for issue in issues:
        st.warning(issue.message)


def _path_explorer(rubric: MultiStepRubric) -> None:
    """Roots, terminals, what each answer unlocks, the root-to-terminal paths (bounded), the text form."""
    graph = rubric.graph
    st.subheader("Path explorer")
    left, right = st.columns(2)
    left.markdown("**Roots** (where a walk starts): " + ", ".join(f"`{r}`" for r in graph.roots))
    terminals = [n for n, r in graph.requirements.items() if r.is_terminal]
    right.markdown("**Terminals** (unlock nothing): " + ", ".join(f"`{t}`" for t in terminals))
    rows = []
    for req in graph.requirements.values():
        if req.is_terminal:
            continue
        names = answer_names(find(state.doc(), req.name))
        for key, children in req.dependencies.items():
            answer = names.get(float(key), fmt(key)) if isinstance(key, int | float) else str(key)
            rows.append(
                {"requirement": req.name, "answer": answer, "unlocks": ", ".join(children) or "(end)"}
            )
    st.markdown("**Branching points** (what each answer unlocks)")
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    total = graph.count_paths()
    c1, c2 = st.columns(2)
    limit = int(c1.number_input("Paths to list", min_value=1, max_value=10_000, value=50, key="dag_limit"))
    through = c2.selectbox("Only paths through", ["(any)", *graph.requirements], key="dag_through")
    paths = graph.paths(limit=limit if through == "(any)" else 10_000)
    if through != "(any)":
        paths = [p for p in paths if through in p][:limit]
    shown = (
        f"{len(paths)} of {total}"
        if through == "(any)"
        else f"{len(paths)} (searched the first 10000 of {total})"
    )
    st.markdown(f"**Root-to-terminal paths**: {shown}")
    st.dataframe(
        pd.DataFrame({"length": [len(p) for p in paths], "path": [" → ".join(p) for p in paths]}),
        hide_index=True,
        width="stretch",
    )
    with st.expander("As text (rubric-grpo rubric show)"):
        st.code(describe(rubric), language="text")
