"""The Rubric section: open, create and save rubric files; name, description, declared roots; the live
validation summary and the YAML the file will contain."""

from __future__ import annotations

import streamlit as st

from envs.gui import document, state
from envs.gui.workspace import RUBRIC_SUFFIXES, WorkspaceError
from rubrics.multistep.io import RubricFileError


def _load() -> None:
    choice = st.session_state.get("rubric_open")
    if choice:
        state.load_rubric_file(choice)


def _new() -> None:
    state.set_doc(document.new_document(), [], replaced=True)
    state.flash("info", "new rubric: add requirements in the Requirements section")


def _save() -> None:
    target = str(st.session_state.get("rubric_save_path") or "").strip()
    try:
        path = state.ws().write_path(target)
        document.save_document(state.doc(), str(path))
    except (WorkspaceError, RubricFileError, ValueError) as exc:
        state.flash("error", f"not saved: {exc}")
        return
    st.session_state.rubric_path = state.ws().relative(path)
    st.session_state.dirty = False
    state.flash("success", f"saved {state.ws().relative(path)}")


def _meta() -> None:
    doc = dict(state.doc())
    rev = state.rev()
    for key in ("name", "description"):
        value = str(st.session_state.get(f"rubric_{key}_{rev}") or "").strip()
        if value:
            doc[key] = value
        else:
            doc.pop(key, None)
    roots = list(st.session_state.get(f"rubric_roots_{rev}") or [])
    if roots:
        doc["roots"] = roots
    else:
        doc.pop("roots", None)
    state.set_doc(doc)


def render() -> None:
    """Draw the section."""
    ws, doc, rev = state.ws(), state.doc(), state.rev()
    st.header("Rubric")
    st.caption(f"working directory: `{ws.root}` (files are read and written only here)")
    files = ws.files(RUBRIC_SUFFIXES)
    left, right = st.columns(2)
    with left:
        st.selectbox("Rubric file to open", files, index=None, key="rubric_open", placeholder="choose a file")
        c1, c2 = st.columns(2)
        c1.button("Open", key="rubric_load", on_click=_load, disabled=not files)
        c2.button("New rubric", key="rubric_new", on_click=_new)
    with right:
        if "rubric_save_path" not in st.session_state:
            st.session_state.rubric_save_path = st.session_state.rubric_path
        st.text_input("Save as (relative to the working directory)", key="rubric_save_path")
        rubric, issues = state.built()
        st.button("Save rubric", key="rubric_save", on_click=_save, type="primary", disabled=rubric is None)
        if rubric is None:
            st.caption("fix the errors below to save: nothing invalid is written")
    st.text_input("Name", value=str(doc.get("name", "")), key=f"rubric_name_{rev}", on_change=_meta)
    st.text_area(
        "Description", value=str(doc.get("description", "")), key=f"rubric_description_{rev}", on_change=_meta
    )
    names = document.names(doc)
    st.multiselect(
        "Declared roots (empty: every requirement nothing unlocks)",
        names,
        default=[r for r in doc.get("roots") or [] if r in names],
        key=f"rubric_roots_{rev}",
        on_change=_meta,
    )
    render_issues(issues)
    with st.expander("YAML as it will be saved"):
        st.code(document.to_yaml(doc), language="yaml")


def render_issues(issues: list[document.Issue]) -> None:
    """The validation summary."""
    errors = [i for i in issues if not i.warning]
    if not errors:
        st.success(f"valid: {len(document.names(state.doc()))} requirements")
    for issue in issues:
        where = f"**{issue.requirement}**" + (f" · field `{issue.field}`" if issue.field else "")
        text = f"{where}: {issue.message}" if issue.requirement else issue.message
        (st.warning if issue.warning else st.error)(text)
