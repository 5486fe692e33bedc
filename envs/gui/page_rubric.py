"""The Rubric section: open, create, save and revert rubric files; name, description, declared roots; the
live validation summary and the YAML the file will contain.

"Save" writes the opened file, edited in place so its comments and layout stay (``envs.gui.lossless``);
before it overwrites anything it says what would be lost (comment lines, changes made on disk since the file
was opened, or another file at that path) and waits for "Overwrite anyway". "Save as" starts blank, never on
the opened file. "Revert to saved" reloads the file, dropping unsaved edits.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from envs.gui import document, state
from envs.gui.lossless import SavePlan
from envs.gui.workspace import RUBRIC_SUFFIXES, WorkspaceError


def _load() -> None:
    choice = st.session_state.get("rubric_open")
    if choice:
        state.load_rubric_file(choice)


def _new() -> None:
    state.set_doc(document.new_document(), [], replaced=True)
    state.set_source(None)
    candidates = ["new_rubric.yaml", *(f"new_rubric_{i}.yaml" for i in range(2, 10_000))]
    name = next(c for c in candidates if not _exists(c))
    st.session_state.rubric_path = name
    state.flash("info", f"new rubric (saved as {name} unless you choose another name): add requirements")


def risks(target: str, plan: SavePlan) -> list[str]:
    """What saving to ``target`` would destroy (empty: nothing; a bad path is reported on save)."""
    try:
        path = state.ws().resolve(target)
    except WorkspaceError:
        return []
    if not path.is_file():
        return []
    source = st.session_state.get("source")
    if source is None or state.ws().relative(path) != source[0]:
        return [f"{target} already exists and is not the file you opened: saving replaces it"]
    out = []
    if plan.lost_comments:
        shown = "; ".join(f"`{c}`" for c in plan.lost_comments[:3])
        more = f" and {len(plan.lost_comments) - 3} more" if len(plan.lost_comments) > 3 else ""
        out.append(f"saving drops {len(plan.lost_comments)} comment line(s) of {target}: {shown}{more}")
    if not plan.in_place:
        out.append(f"saving rewrites {target} from scratch, so its layout changes ({plan.note})")
    if _read(path) != source[1]:
        out.append(f"{target} changed on disk since it was opened: saving replaces those changes")
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _write(target: str, confirm_key: str) -> bool:
    ss = st.session_state
    rubric, issues = state.built()
    if rubric is None:
        state.flash("error", f"not saved: {issues[0].message if issues else 'the rubric is invalid'}")
        return False
    plan = state.save_plan()
    found = risks(target, plan)
    if found and not ss.get(confirm_key):
        state.flash("error", f"not saved: {found[0]}; tick 'Overwrite anyway' to save regardless")
        return False
    try:
        path = state.ws().write_path(target)
        path.write_text(plan.text, encoding="utf-8")
    except (WorkspaceError, OSError) as exc:
        state.flash("error", f"not saved: {exc}")
        return False
    ss.pop(confirm_key, None)
    state.set_source(state.ws().relative(path), plan.text)
    kept = "comments and layout kept" if plan.in_place else "written from scratch"
    state.flash("success", f"saved {state.ws().relative(path)} ({kept})")
    return True


def _save() -> None:
    _write(str(st.session_state.rubric_path), "rubric_confirm")


def _save_as() -> None:
    target = str(st.session_state.get("rubric_save_path") or "").strip()
    if not target:
        state.flash("error", "not saved: type a file name to save as")
        return
    if _write(target, "rubric_confirm_as"):
        st.session_state.rubric_save_path = ""


def _revert() -> None:
    path = str(st.session_state.rubric_path)
    if state.load_rubric_file(path):
        state.flash("info", f"reverted to the saved {path}: unsaved changes dropped")


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
    rubric, issues = state.built()
    left, right = st.columns(2)
    with left:
        st.selectbox("Rubric file to open", files, index=None, key="rubric_open", placeholder="choose a file")
        c1, c2 = st.columns(2)
        c1.button("Open", key="rubric_load", on_click=_load, disabled=not files)
        c2.button("New rubric", key="rubric_new", on_click=_new)
    with right:
        _save_panel(rubric is not None)
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
        st.code(state.save_plan().text, language="yaml")


def _save_panel(valid: bool) -> None:
    ss = st.session_state
    plan = state.save_plan()
    current = str(ss.rubric_path)
    on_disk = _exists(current)
    source = ss.get("source")
    st.markdown(f"File: `{current}`" + ("" if on_disk else " (not written yet)"))
    if source is not None and plan.in_place:
        st.caption("saving edits the file in place: its comments and layout stay, only changed values move")
    found = risks(current, plan)
    for risk in found:
        st.warning(risk)
    if found:
        st.checkbox("Overwrite anyway", key="rubric_confirm")
    c1, c2 = st.columns(2)
    c1.button(
        "Save",
        key="rubric_save",
        on_click=_save,
        type="primary",
        disabled=not valid or (bool(found) and not ss.get("rubric_confirm")),
    )
    c2.button(
        "Revert to saved",
        key="rubric_revert",
        on_click=_revert,
        disabled=not (on_disk and ss.dirty and source is not None),
        help="reload the file from disk, dropping unsaved changes",
    )
    if not valid:
        st.caption("fix the errors below to save: nothing invalid is written")
    ss.setdefault("rubric_save_path", "")
    st.text_input(
        "Save as (a new file, relative to the working directory)",
        key="rubric_save_path",
        placeholder="e.g. my_rubric.yaml",
    )
    target = str(ss.get("rubric_save_path") or "").strip()
    found_as = risks(target, plan) if target else []
    for risk in found_as:
        st.warning(risk)
    if found_as:
        st.checkbox("Overwrite anyway", key="rubric_confirm_as")
    st.button(
        "Save as",
        key="rubric_save_as",
        on_click=_save_as,
        disabled=not valid or not target or (bool(found_as) and not ss.get("rubric_confirm_as")),
    )


def _exists(relative: str) -> bool:
    try:
        return state.ws().resolve(relative).is_file()
    except WorkspaceError:
        return False


def render_issues(issues: list[document.Issue]) -> None:
    """The validation summary."""
    errors = [i for i in issues if not i.warning]
    if not errors:
        st.success(f"valid: {len(document.names(state.doc()))} requirements")
    for issue in issues:
        where = f"**{issue.requirement}**" + (f" · field `{issue.field}`" if issue.field else "")
        text = f"{where}: {issue.message}" if issue.requirement else issue.message
        (st.warning if issue.warning else st.error)(text)
