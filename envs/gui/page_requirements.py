"""The Requirements section: the list, and one editor that adds a new requirement or edits one in place.

The editor's widgets live under fixed keys ``ef_<field>`` (see ``envs.gui.editor``); choosing a
requirement loads its fields, "Apply" writes them back (a new name is renamed everywhere), "Delete" removes
it and every reference to it. The library's errors for the edited requirement appear under the field they
name.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from envs.gui import document, editor, state
from envs.gui.document import Issue

NEW = "(new requirement)"
"""The editor target that adds a requirement."""
PREFIX = "ef_"
"""Prefix of the editor's field widget keys."""
FIELD_GROUPS = {
    "name": ("name",),
    "type": ("type", "options", "labels", "low", "high", "tolerance"),
    "question": ("question",),
    "judge": ("judge",),
    "dependencies": ("dependencies", "roots"),
    "rules": ("rules",),
}
"""Where the editor shows an issue, by the field the library's message names."""
PARENTS = PREFIX + "parents"
"""Widget key of "Unlocked by": the answers of other requirements that unlock the edited one."""
NAME_ERROR = "edit_name_error"
"""Session key of the refusal shown under the Name field (an empty or invalid name is never applied)."""


def _fields_now() -> dict[str, Any]:
    ss = st.session_state
    return {k[len(PREFIX) :]: v for k, v in ss.items() if isinstance(k, str) and k.startswith(PREFIX)}


def _load_editor(target: str | None = None) -> None:
    """Put the target's fields (blank for a new one) into the editor's widgets."""
    ss = st.session_state
    target = target or ss.get("edit_target") or NEW
    names = document.names(state.doc())
    if target not in names:
        target = NEW
    for key in [k for k in ss if isinstance(k, str) and k.startswith(PREFIX)]:
        del ss[key]
    fields = (
        editor.blank_fields()
        if target == NEW
        else editor.fields_from_requirement(document.find(state.doc(), target))
    )
    for key, value in fields.items():
        ss[PREFIX + key] = value
    options = _parent_options(state.doc(), target)
    current = {_parent_key(p, v) for p, v in ([] if target == NEW else document.parents(state.doc(), target))}
    ss[PARENTS] = [k for k in options if k in current]
    ss.edit_target = target
    ss.edit_loaded = (target, state.rev())
    ss.pop(NAME_ERROR, None)


def _parent_key(parent: str, value: Any) -> str:
    return f"{parent}={editor.slot_key(value)}"


def _parent_options(doc: document.Doc, target: str) -> dict[str, tuple[str, Any, str]]:
    """Every answer of every other requirement that could unlock ``target``: key -> (name, value, label)."""
    out: dict[str, tuple[str, Any, str]] = {}
    for req in doc.get("requirements") or []:
        name = str(req.get("name"))
        if name == target:
            continue
        try:
            slots = editor.slots(editor.fields_from_requirement(req))
        except editor.FieldError:
            continue
        for slot in slots:
            out[_parent_key(name, slot.value)] = (name, slot.value, f"{name}: {slot.label}")
    return out


def _warn_new_roots(before: document.Doc, after: document.Doc) -> None:
    """Say so when an edit adds a root: every root starts a walk, so an extra one changes the reward."""
    old, new = document.roots(before), document.roots(after)
    added = [r for r in new if r not in old]
    if old and added and len(new) > len(old):
        state.flash(
            "warning",
            f"{', '.join(repr(a) for a in added)} is now a root: nothing unlocks it, so every walk also "
            f"starts there ({len(new)} roots: {', '.join(new)}). Choose what unlocks it under 'Unlocked by'.",
        )


def _clear_name_error() -> None:
    st.session_state.pop(NAME_ERROR, None)


def _apply() -> None:
    ss = st.session_state
    target = ss.get("edit_target", NEW)
    fields = _fields_now()
    try:
        req = editor.requirement_from_fields(fields)
        if target != NEW and target in document.names(state.doc()):
            req = editor.keep_empty_branches(req, document.find(state.doc(), target), fields)
    except editor.FieldError as exc:
        state.flash("error", f"field {exc.field!r}: {exc}")
        return
    problem = editor.name_problem(req["name"])
    if problem:  # refused before anything is renamed: '' would otherwise replace every reference
        ss[NAME_ERROR] = f"{problem}; nothing was changed"
        return
    before = state.doc()
    options = _parent_options(before, target)
    unlocked_by = [options[k][:2] for k in ss.get(PARENTS) or [] if k in options]
    try:
        if target == NEW:
            doc, scenarios = document.add_requirement(before, req), state.scenarios()
        else:
            doc, scenarios = document.replace_requirement(before, target, req, state.scenarios())
        doc = document.set_parents(doc, req["name"], [(p, v) for p, v in unlocked_by if p != req["name"]])
    except ValueError as exc:
        state.flash("error", str(exc))
        return
    state.set_doc(doc, scenarios)
    if target == NEW:
        state.flash("success", f"added requirement {req['name']!r}")
    elif req["name"] != target:
        state.flash("success", f"renamed {target!r} to {req['name']!r} everywhere it is referenced")
    else:
        state.flash("success", f"updated requirement {target!r}")
    _warn_new_roots(before, doc)
    _load_editor(NEW if target == NEW else req["name"])


def _delete() -> None:
    target = st.session_state.get("edit_target", NEW)
    if target == NEW:
        return
    before = state.doc()
    doc, scenarios = document.delete_requirement(before, target, state.scenarios())
    state.set_doc(doc, scenarios)
    state.flash("success", f"deleted requirement {target!r} and every reference to it")
    _warn_new_roots(before, doc)
    _load_editor(NEW)


def _summary(doc: document.Doc, issues: list[Issue]) -> pd.DataFrame:
    rubric, _ = state.built()
    levels = rubric.graph.levels if rubric else {}
    rows = []
    for req in doc.get("requirements") or []:
        deps = req.get("dependencies") or {}
        branches = "; ".join(f"{editor.fmt(k)} → {', '.join(v)}" for k, v in deps.items() if v) or "terminal"
        problems = " | ".join(i.message for i in issues if i.concerns(str(req.get("name"))))
        rows.append(
            {
                "name": req.get("name"),
                "type": req.get("type", "binary"),
                "level": levels.get(str(req.get("name")), None),
                "judge": req.get("judge") or f"(default: {doc.get('default_judge')})",
                "branches": branches,
                "problems": problems,
            }
        )
    return pd.DataFrame(rows)


def _issues_for(issues: list[Issue], group: str, target: str) -> None:
    for issue in issues:
        if issue.concerns(target) and (issue.field or "") in FIELD_GROUPS[group]:
            (st.warning if issue.warning else st.error)(issue.message)


def _ensure_editor() -> None:
    ss = st.session_state
    stale = ss.get("edit_target", NEW) not in [NEW, *document.names(state.doc())]
    if stale or ss.get("edit_loaded") != (ss.get("edit_target", NEW), state.rev()) or "ef_name" not in ss:
        _load_editor()


def render() -> None:
    """Draw the section."""
    doc = state.doc()
    _, issues = state.built()
    st.header("Requirements")
    names = document.names(doc)
    if names:
        st.dataframe(_summary(doc, issues), hide_index=True, width="stretch")
    else:
        st.info("no requirements yet: add the first one below")
    _ensure_editor()
    ss = st.session_state
    st.selectbox("Edit", [NEW, *names], key="edit_target", on_change=_load_editor)
    target = ss.edit_target
    placed = {f for fields in FIELD_GROUPS.values() for f in fields}
    for issue in issues:
        if issue.concerns(target) and (issue.field or "") not in placed:
            st.error(issue.message)
    judges = list(doc.get("judges") or {})
    c1, c2, c3 = st.columns([2, 1, 1])
    c1.text_input(
        "Name (an identifier; renaming updates every reference)", key="ef_name", on_change=_clear_name_error
    )
    c2.selectbox("Type", editor.REQUIREMENT_KINDS, key="ef_type")
    if ss.get("ef_judge") not in ["", *judges]:
        ss.ef_judge = ""
    c3.selectbox(
        "Judge",
        ["", *judges],
        key="ef_judge",
        format_func=lambda j: j or f"(default: {doc.get('default_judge')})",
    )
    with c1:
        if ss.get(NAME_ERROR):
            st.error(ss[NAME_ERROR])
        _issues_for(issues, "name", target)
    with c3:
        _issues_for(issues, "judge", target)
    st.text_area("Question (what a judge is asked about the reply)", key="ef_question", height=90)
    _issues_for(issues, "question", target)
    _parent_picker(doc, target)
    slots = _type_fields(ss.ef_type, issues, target)
    _dependency_pickers(slots, [n for n in names if n != target], issues, target)
    _rule_fields(slots, issues, target)
    b1, b2, b3 = st.columns(3)
    b1.button(
        "Add requirement" if target == NEW else "Apply changes",
        key="edit_apply",
        on_click=_apply,
        type="primary",
    )
    b2.button("Reset", key="edit_reset", on_click=_load_editor)
    b3.button("Delete requirement", key="edit_delete", on_click=_delete, disabled=target == NEW)


def _type_fields(kind: str, issues: list[Issue], target: str) -> list[editor.Slot]:
    ss = st.session_state
    if kind == "discrete":
        st.text_area("Options, one per line as `value: meaning`", key="ef_options", height=90)
    elif kind == "continuous":
        c1, c2, c3 = st.columns(3)
        c1.number_input("Low", key="ef_low", format="%g")
        c2.number_input("High", key="ef_high", format="%g")
        c3.number_input(
            "Tolerance (largest distance still correct)", key="ef_tolerance", min_value=0.0, format="%g"
        )
        st.text_input("Branch values (numbers; an answer routes to the nearest)", key="ef_keys")
    elif kind == "unit_vector":
        st.text_area("Labels, one per line (dependency keys are their positions)", key="ef_labels", height=90)
    _issues_for(issues, "type", target)
    try:
        slots = editor.slots(_fields_now())
    except editor.FieldError as exc:
        st.error(f"field {exc.field!r}: {exc}")
        return []
    for slot in slots:
        for key, blank in [
            (f"dep_{slot.key}", []),
            *[(f"rule_{slot.key}_{k}", "") for k in (*editor.RULE_KINDS, "regex")],
            (f"rule_{slot.key}_negation_aware", True),
        ]:
            ss.setdefault(PREFIX + key, blank)
    return slots


def _parent_picker(doc: document.Doc, target: str) -> None:
    ss = st.session_state
    options = _parent_options(doc, target)
    ss[PARENTS] = [k for k in ss.get(PARENTS) or [] if k in options]
    st.multiselect(
        "Unlocked by: the answers of other requirements that lead here "
        "(none: a root, where every walk starts)",
        list(options),
        key=PARENTS,
        format_func=lambda k: options[k][2],
    )
    if options and not ss[PARENTS]:
        roots = [r for r in document.roots(doc) if r != target]
        verb = "will be" if target == NEW else "is"
        st.caption(
            f"nothing unlocks it: it {verb} a root beside {', '.join(roots) or 'none'}"
            if not doc.get("roots")
            else "nothing unlocks it and it is not a declared root: it will be unreachable"
        )


def _dependency_pickers(
    slots: list[editor.Slot], options: list[str], issues: list[Issue], target: str
) -> None:
    ss = st.session_state
    st.markdown("**Dependencies**: what each answer unlocks (nothing chosen: the branch ends)")
    cols = st.columns(max(1, min(3, len(slots))))
    for i, slot in enumerate(slots):
        key = f"{PREFIX}dep_{slot.key}"
        ss[key] = [n for n in ss.get(key) or [] if n in options]
        cols[i % len(cols)].multiselect(f"If the answer is {slot.label}, unlock", options, key=key)
    _issues_for(issues, "dependencies", target)


RULE_LABELS = {
    "any": "any of (one phrase per line)",
    "all": "all of",
    "none": "none of",
    "negated": "negated (denying one asserts this answer)",
}
"""Editor labels of the library's rule keys (others are shown by their key)."""


def _box_height(text: Any, least: int = 100, most: int = 400) -> int:
    """A text box tall enough for its lines (about 24 px each), within [least, most]."""
    lines = max(1, len(str(text or "").splitlines()))
    return max(least, min(most, 24 * lines + 40))


def _rule_fields(slots: list[editor.Slot], issues: list[Issue], target: str) -> None:
    ss = st.session_state
    with st.expander("Rules (for rule judges): the first answer whose rule matches the reply", expanded=True):
        for slot in slots:
            st.markdown(f"answer **{slot.label}**")
            cols = st.columns(len(editor.RULE_KINDS))
            for col, kind in zip(cols, editor.RULE_KINDS, strict=True):
                key = f"{PREFIX}rule_{slot.key}_{kind}"
                col.text_area(RULE_LABELS.get(kind, kind), key=key, height=_box_height(ss.get(key)))
            key = f"{PREFIX}rule_{slot.key}_regex"
            st.text_area(
                "regex (one pattern, matched case-insensitively; the box wraps it, line breaks are dropped)",
                key=key,
                height=_box_height(editor.wrap_regex(ss.get(key)), least=68, most=300),
            )
            st.checkbox(
                "negation-aware phrases (a phrase after 'not', 'never', ... does not count as said)",
                key=f"{PREFIX}rule_{slot.key}_negation_aware",
            )
            problem = editor.regex_problem(ss.get(key))
            if problem:
                st.error(f"answer {slot.label}: {problem}")
        _issues_for(issues, "rules", target)
