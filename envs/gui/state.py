"""The app's session state: the working directory, the document, the scenarios, and messages shown once.

Streamlit reruns the script on every interaction; everything that must survive a rerun lives here, under
fixed keys. ``rev`` counts document replacements (load, new): widgets that show document values carry it in
their keys, so a freshly loaded file never shows a previous file's stale widget values.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import streamlit as st

from envs.gui import document, lossless
from envs.gui.document import Doc, Issue
from envs.gui.launch import DIR_ENV, FILE_ENV
from envs.gui.workspace import Workspace, WorkspaceError
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.rubric_io import RubricFileError


def init() -> None:
    """Fill the session state on the first run: workspace, document (from ``FILE_ENV`` if set), no
    scenarios."""
    ss = st.session_state
    if "ws" in ss:
        return
    ss.ws = Workspace.at(os.environ.get(DIR_ENV) or os.getcwd())
    ss.doc = document.new_document()
    ss.scenarios = []
    ss.rubric_path = "rubric.yaml"
    ss.scenario_path = "scenarios.yaml"
    ss.rev = 0
    ss.flash = []
    ss.dirty = False
    ss.source = None
    start = os.environ.get(FILE_ENV)
    if start and (ss.ws.root / start).exists():
        load_rubric_file(start)
    elif start:
        ss.rubric_path = start
        flash("info", f"{start} does not exist yet: a new rubric, written there on the first save")


def ws() -> Workspace:
    """The working directory."""
    workspace: Workspace = st.session_state.ws
    return workspace


def doc() -> Doc:
    """The rubric being edited."""
    current: Doc = st.session_state.doc
    return current


def scenarios() -> list[dict[str, Any]]:
    """The scenarios being edited."""
    current: list[dict[str, Any]] = st.session_state.scenarios
    return current


def set_doc(new: Doc, scenarios_: list[dict[str, Any]] | None = None, replaced: bool = False) -> None:
    """Replace the document (and scenarios); ``replaced`` for a load or a new rubric (resets widgets)."""
    st.session_state.doc = new
    if scenarios_ is not None:
        st.session_state.scenarios = scenarios_
    st.session_state.dirty = not replaced
    if replaced:
        st.session_state.rev += 1
        st.session_state.pop("grade_report", None)


def set_source(relative: str | None, text: str | None = None) -> None:
    """Record the file the document now matches (loaded or saved): its path, text and document, which a
    save edits in place; None for a rubric no file holds yet."""
    ss = st.session_state
    ss.source = None if relative is None else (relative, text, copy.deepcopy(ss.doc))
    if relative is not None:
        ss.rubric_path = relative
    ss.dirty = False


def save_plan() -> lossless.SavePlan:
    """What saving the document would write (the opened file edited in place), computed once per change."""
    ss = st.session_state
    source = ss.get("source")
    cache = ss.get("plan_cache")
    if cache is None or cache[0] is not ss.doc or cache[1] is not source:
        text, doc_ = (source[1], source[2]) if source else (None, None)
        cache = (ss.doc, source, lossless.plan_save(ss.doc, text, doc_))
        ss["plan_cache"] = cache
    plan: lossless.SavePlan = cache[2]
    return plan


def rev() -> int:
    """How many times the document was replaced (part of document widgets' keys)."""
    return int(st.session_state.rev)


def built() -> tuple[MultiStepRubric | None, list[Issue]]:
    """The library's rubric for the document and its issues (computed once per rerun)."""
    ss = st.session_state
    cache = ss.get("built_cache")
    if cache is None or cache[0] is not ss.doc:
        rubric, issues = document.build(ss.doc)
        cache = (ss.doc, rubric, issues)
        ss["built_cache"] = cache
    return cache[1], cache[2]


def flash(kind: str, message: str) -> None:
    """A message shown at the top of the next run (``success``, ``error``, ``warning``, ``info``)."""
    st.session_state.flash.append((kind, message))


def show_flash() -> None:
    """Show and clear pending messages."""
    for kind, message in st.session_state.flash:
        getattr(st, kind)(message)
    st.session_state.flash = []


def load_rubric_file(relative: str) -> bool:
    """Load a rubric file from the working directory; on error keep the document and flash the message."""
    try:
        path = ws().read_path(relative)
        loaded = document.load_document(str(path))
    except (WorkspaceError, RubricFileError) as exc:
        flash("error", f"could not load {relative}: {exc}")
        return False
    set_doc(loaded, [], replaced=True)
    set_source(ws().relative(path), path.read_text(encoding="utf-8", errors="replace"))
    flash("success", f"loaded {ws().relative(path)}: {len(loaded['requirements'])} requirements")
    return True
