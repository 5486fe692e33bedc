"""The rubric builder's Streamlit script: ``rubric-grpo gui [FILE]`` runs it (``streamlit run`` works too).

The sidebar chooses a section and shows whether the rubric is valid and saved; each section is drawn by
its own module. Configuration comes from the environment (``RUBRIC_GRPO_GUI_DIR``: the working directory;
``RUBRIC_GRPO_GUI_FILE``: a rubric to open), so the CLI, tests and ``streamlit run`` share one entry point.
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from envs.gui import (
    document,
    page_dag,
    page_grade,
    page_judges,
    page_requirements,
    page_rubric,
    page_scenarios,
    state,
)

# The app's sections, in sidebar order. (No docstring here: Streamlit would draw a bare string.)
SECTIONS: dict[str, Callable[[], None]] = {
    "Rubric": page_rubric.render,
    "Requirements": page_requirements.render,
    "Judges & strategy": page_judges.render,
    "DAG & paths": page_dag.render,
    "Grade a reply": page_grade.render,
    "Scenarios": page_scenarios.render,
}


def main() -> None:
    """Draw one run of the app."""
    st.set_page_config(page_title="rubric builder", page_icon="🧭", layout="wide")
    state.init()
    _, issues = state.built()
    with st.sidebar:
        st.title("Rubric builder")
        section = st.radio("Section", list(SECTIONS), key="section")
        doc = state.doc()
        st.markdown(f"**{doc.get('name') or '(unnamed)'}** · `{st.session_state.rubric_path}`")
        errors = [i for i in issues if not i.warning]
        if errors:
            st.error(f"invalid: {len(errors)} error(s); see the Rubric section")
        else:
            st.success(f"valid · {len(document.names(doc))} requirements")
        if st.session_state.dirty:
            st.caption("unsaved changes (save in the Rubric section)")
    state.show_flash()
    SECTIONS[section]()


main()
