"""The Scenarios section: load, edit, add, delete and save scenarios, each checked against the rubric; and
scenario generation from the current rubric when the synthetic pipeline exists."""

from __future__ import annotations

from typing import Any

import streamlit as st

from envs.gui import document, optional_features, scenario_doc, state
from envs.gui.workspace import SCENARIO_SUFFIXES, WorkspaceError
from rubrics.multistep.rubric_io import RubricFileError

NEW = "(new scenario)"
"""The editor target that adds a scenario."""
PREFIX = "sf_"
"""Prefix of the scenario editor's field widget keys."""


def _label(i: int, s: dict[str, Any]) -> str:
    return str(s.get("name") or f"scenario {i}")


def _index(label: str) -> int | None:
    for i, s in enumerate(state.scenarios()):
        if _label(i, s) == label:
            return i
    return None


def _load_editor(target: str | None = None) -> None:
    ss = st.session_state
    target = target or ss.get("sc_target") or NEW
    index = _index(target)
    for key in [k for k in ss if isinstance(k, str) and k.startswith(PREFIX)]:
        del ss[key]
    names = document.names(state.doc())
    data = state.scenarios()[index] if index is not None else {"prompt": "", "answers": {}}
    for key, value in scenario_doc.fields_from_scenario(data, names).items():
        ss[PREFIX + key] = value
    ss.sc_target = target if index is not None else NEW
    ss.sc_loaded = (ss.sc_target, state.rev(), len(state.scenarios()))


def _fields() -> dict[str, Any]:
    ss = st.session_state
    return {k[len(PREFIX) :]: v for k, v in ss.items() if isinstance(k, str) and k.startswith(PREFIX)}


def _apply() -> None:
    ss = st.session_state
    data = scenario_doc.scenario_from_fields(_fields(), document.names(state.doc()))
    scenarios = list(state.scenarios())
    index = _index(ss.get("sc_target", NEW))
    if index is None:
        scenarios.append(data)
    else:
        scenarios[index] = data
    st.session_state.scenarios = scenarios
    state.flash("success", f"{'added' if index is None else 'updated'} scenario {data.get('name', '')!r}")
    _load_editor(_label(len(scenarios) - 1 if index is None else index, data))


def _delete() -> None:
    index = _index(st.session_state.get("sc_target", NEW))
    if index is not None:
        st.session_state.scenarios = [s for i, s in enumerate(state.scenarios()) if i != index]
        state.flash("success", "deleted the scenario")
    _load_editor(NEW)


def _load_file() -> None:
    choice = st.session_state.get("sc_open")
    rubric, _ = state.built()
    try:
        path = state.ws().read_path(str(choice or ""))
        st.session_state.scenarios = scenario_doc.load(str(path), rubric)
    except (WorkspaceError, RubricFileError) as exc:
        state.flash("error", f"could not load scenarios: {exc}")
        return
    st.session_state.sc_save_path = state.ws().relative(path)
    state.flash("success", f"loaded {len(state.scenarios())} scenarios from {state.ws().relative(path)}")
    _load_editor(NEW)


def _save_file() -> None:
    rubric, _ = state.built()
    try:
        path = state.ws().write_path(str(st.session_state.get("sc_save_path") or ""))
        scenario_doc.save(state.scenarios(), str(path), rubric, str(state.doc().get("name", "")))
    except (WorkspaceError, ValueError) as exc:
        state.flash("error", f"scenarios not saved: {exc}")
        return
    state.flash("success", f"saved {len(state.scenarios())} scenarios to {state.ws().relative(path)}")


def _generate() -> None:
    ss = st.session_state
    try:
        made, report = optional_features.generate(
            state.doc(),
            str(ss.get("gen_base_url") or ""),
            str(ss.get("gen_model") or ""),
            str(ss.get("gen_api_key_env") or "") or None,
            int(ss.get("gen_n", 4)),
            int(ss.get("gen_seed", 0)),
        )
    except Exception as exc:  # the pipeline's or the endpoint's message, shown as is
        state.flash("error", f"generation failed: {type(exc).__name__}: {exc}")
        return
    ss.scenarios = [*state.scenarios(), *made]
    ss.gen_report = report
    state.flash("success", f"generated {len(made)} scenarios: review them, then save")


def _generate_panel(valid: bool) -> None:
    st.subheader("Generate scenarios")
    llm = [j for j in (state.doc().get("judges") or {}).values() if j.get("type") == "llm"]
    ss = st.session_state
    ss.setdefault("gen_base_url", llm[0].get("base_url", "") if llm else "")
    ss.setdefault("gen_model", llm[0].get("model", "") if llm else "")
    ss.setdefault("gen_api_key_env", llm[0].get("api_key_env", "") if llm else "")
    c1, c2, c3 = st.columns(3)
    c1.text_input("Endpoint (OpenAI-compatible base URL)", key="gen_base_url")
    c2.text_input("Model", key="gen_model")
    c3.text_input("API key environment variable", key="gen_api_key_env")
    c1.number_input("How many", min_value=1, max_value=200, value=4, key="gen_n")
    c2.number_input("Plan seed", min_value=0, value=0, key="gen_seed")
    reason = optional_features.available(optional_features.SYNTH)
    if reason is None and not valid:
        reason = "the rubric is not valid"
    if reason is None and not (ss.gen_base_url and ss.gen_model):
        reason = "give an endpoint and a model"
    st.button(
        "Generate scenarios from this rubric",
        key="sc_generate",
        disabled=reason is not None,
        help=reason or "plans every branch, generates, validates, re-grades and dedupes (envs.synth)",
        on_click=_generate,
    )
    if reason is not None:
        st.caption(f"generation unavailable: {reason}")
    if ss.get("gen_report"):
        with st.expander("The last generation's report"):
            st.json(ss.gen_report)


def render() -> None:
    """Draw the section."""
    ss = st.session_state
    rubric, _ = state.built()
    st.header("Scenarios")
    if rubric is None:
        st.warning("the rubric is not valid: scenarios are not checked against it until it is")
    c1, c2 = st.columns(2)
    with c1:
        st.selectbox("Scenario file to open", state.ws().files(SCENARIO_SUFFIXES), index=None, key="sc_open")
        st.button("Open scenarios", key="sc_load", on_click=_load_file)
    with c2:
        ss.setdefault("sc_save_path", ss.scenario_path)
        st.text_input("Save scenarios as", key="sc_save_path")
        st.button("Save scenarios", key="sc_save", on_click=_save_file, disabled=not state.scenarios())
    problems = scenario_doc.problems(state.scenarios(), rubric)
    st.markdown(f"**{len(state.scenarios())} scenarios**, {len(problems)} with problems")
    for message in problems.values():
        st.error(message)
    labels = [_label(i, s) for i, s in enumerate(state.scenarios())]
    if (
        ss.get("sc_target", NEW) not in [NEW, *labels]
        or ss.get("sc_loaded") != (ss.get("sc_target", NEW), state.rev(), len(labels))
        or f"{PREFIX}prompt" not in ss
    ):
        _load_editor()
    st.selectbox("Edit", [NEW, *labels], key="sc_target", on_change=_load_editor)
    index = _index(ss.sc_target)
    if index is not None and index in problems:
        st.error(problems[index])
    c1, c2 = st.columns(2)
    c1.text_input("Name", key=f"{PREFIX}name")
    c2.text_input("Description (one line)", key=f"{PREFIX}description")
    st.text_area("Prompt (text, or a YAML list of messages)", key=f"{PREFIX}prompt", height=100)
    st.text_area(
        "Hidden description (never shown to the policy)", key=f"{PREFIX}hidden_description", height=70
    )
    st.text_area("Completion (a reply to score offline; optional)", key=f"{PREFIX}completion", height=70)
    with st.expander("Ground truth and reveals, per requirement", expanded=True):
        for name in document.names(state.doc()):
            for key, blank in (("answer", ""), ("reasoning", ""), ("reveal", "")):
                ss.setdefault(f"{PREFIX}{key}_{name}", blank)
            a, b, c = st.columns([1, 2, 2])
            a.text_input(f"{name}: answer", key=f"{PREFIX}answer_{name}")
            b.text_input("reasoning", key=f"{PREFIX}reasoning_{name}")
            c.text_input("revealed when satisfied", key=f"{PREFIX}reveal_{name}")
    b1, b2 = st.columns(2)
    b1.button(
        "Add scenario" if index is None else "Apply scenario", key="sc_apply", on_click=_apply, type="primary"
    )
    b2.button("Delete scenario", key="sc_delete", on_click=_delete, disabled=index is None)

    _generate_panel(rubric is not None)
