"""The Grade section: type a reply, grade it with the rubric's judges against a scenario's ground truth (or
one typed here), and see the path it takes, the reveals and the reward under every strategy."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from envs.gui import document, grading, optional_features, scenario_doc, state
from envs.gui.editor import fmt
from envs.gui.workspace import SCENARIO_SUFFIXES, WorkspaceError
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.rubric_io import RubricFileError

TYPED = "(ground truth typed here)"
"""Grade against answers typed in this section instead of a scenario's."""
OWN = "(each requirement's own judge)"
"""Grade with the judges the rubric configures."""


def _scenario(label: str) -> dict[str, Any] | None:
    for i, s in enumerate(state.scenarios()):
        if (s.get("name") or f"scenario {i}") == label:
            return s
    return None


def _use_scenario() -> None:
    ss = st.session_state
    scenario = _scenario(ss.get("grade_source", TYPED))
    if scenario is not None:
        prompt = scenario.get("prompt", "")
        ss.grade_prompt = prompt if isinstance(prompt, str) else str(prompt)
        if isinstance(scenario.get("completion"), str):
            ss.grade_reply = scenario["completion"]


def _open_scenarios() -> None:
    """Load a scenario file here, to grade against one of its scenarios without typing its answers."""
    ss = st.session_state
    rubric, _ = state.built()
    try:
        path = state.ws().read_path(str(ss.get("grade_sc_open") or ""))
        ss.scenarios = scenario_doc.load(str(path), rubric)
    except (WorkspaceError, RubricFileError) as exc:
        state.flash("error", f"could not load scenarios: {exc}")
        return
    labels = [s.get("name") or f"scenario {i}" for i, s in enumerate(state.scenarios())]
    if labels:
        ss.grade_source = labels[0]
        _use_scenario()
    state.flash("success", f"loaded {len(labels)} scenarios from {state.ws().relative(path)}")


def _copy_truth() -> None:
    """Put the chosen scenario's answers into the typed fields, to grade against a variation of them."""
    ss = st.session_state
    scenario = _scenario(ss.get("grade_source", TYPED))
    if scenario is None:
        return
    for name in document.names(state.doc()):
        entry = (scenario.get("answers") or {}).get(name)
        value = entry.get("answer") if isinstance(entry, dict) else entry
        if isinstance(value, list):
            ss[f"grade_truth_{name}"] = ", ".join(fmt(v) for v in value)
        else:
            ss[f"grade_truth_{name}"] = "" if value is None else fmt(value)
    ss.grade_source = TYPED


def _truth_table(scenario: dict[str, Any]) -> pd.DataFrame:
    rows = []
    for name, entry in (scenario.get("answers") or {}).items():
        value = entry.get("answer") if isinstance(entry, dict) else entry
        shown = ", ".join(fmt(v) for v in value) if isinstance(value, list) else fmt(value)
        rows.append({"requirement": name, "true answer": shown})
    return pd.DataFrame(rows)


def _answers(names: list[str]) -> tuple[dict[str, Any], dict[str, str], Any]:
    ss = st.session_state
    scenario = _scenario(ss.get("grade_source", TYPED))
    if scenario is not None:
        return (
            dict(scenario.get("answers") or {}),
            dict(scenario.get("revealed_info") or {}),
            scenario.get("prompt"),
        )
    answers = {}
    for name in names:
        value = grading.parse_answer(str(ss.get(f"grade_truth_{name}") or ""))
        if value is not None:
            answers[name] = {"answer": value}
    return answers, {}, ss.get("grade_prompt") or None


def _grade() -> None:
    ss = st.session_state
    ss.pop("grade_report", None)
    ss.pop("grade_error", None)
    judge = ss.get("grade_judge", OWN)
    try:
        rubric = grading.with_default_judge(state.doc(), None if judge == OWN else judge)
        answers, reveals, prompt = _answers(document.names(state.doc()))
        if not answers:
            raise ValueError("no ground truth: type an answer for at least one root, or choose a scenario")
        ss.grade_report = grading.grade(rubric, answers, str(ss.get("grade_reply") or ""), prompt, reveals)
    except Exception as exc:  # the judge's or the library's message, shown as is
        ss.grade_error = f"{type(exc).__name__}: {exc}"


def render() -> None:
    """Draw the section."""
    ss = st.session_state
    doc = state.doc()
    rubric, issues = state.built()
    st.header("Grade a reply")
    if rubric is None:
        st.error("the rubric is not valid: " + "; ".join(i.message for i in issues))
        return
    labels = [s.get("name") or f"scenario {i}" for i, s in enumerate(state.scenarios())]
    if ss.get("grade_source") not in [TYPED, *labels]:
        ss.grade_source = TYPED
    files = state.ws().files(SCENARIO_SUFFIXES)
    c1, c2 = st.columns([3, 1])
    c1.selectbox(
        "Scenario file (its scenarios' answers are the ground truth)",
        files,
        index=None,
        key="grade_sc_open",
        placeholder="choose a file",
    )
    c2.button("Load scenarios", key="grade_sc_load", on_click=_open_scenarios, disabled=not files)
    st.selectbox("Ground truth from", [TYPED, *labels], key="grade_source", on_change=_use_scenario)
    chosen = _scenario(ss.grade_source)
    if chosen is not None:
        with st.expander(f"ground truth of {ss.grade_source}", expanded=False):
            st.dataframe(_truth_table(chosen), hide_index=True, width="stretch")
        st.button(
            "Copy these answers into typed ground truth (to vary them)",
            key="grade_copy",
            on_click=_copy_truth,
        )
    if ss.grade_source == TYPED:
        st.caption("the true answer of each requirement for this situation (blank: not part of it)")
        cols = st.columns(3)
        for i, name in enumerate(document.names(doc)):
            req = rubric.graph.requirements[name]
            cols[i % 3].text_input(
                f"{name} ({req.kind})", key=f"grade_truth_{name}", help=req.response_format.describe_answer()
            )
    st.text_area("Prompt (the situation the policy saw)", key="grade_prompt", height=100)
    st.text_area("Reply to grade", key="grade_reply", height=140)
    st.selectbox("Judge", [OWN, *(doc.get("judges") or {})], key="grade_judge")
    st.button("Grade the reply", key="grade_run", on_click=_grade, type="primary")
    if "grade_error" in ss:
        st.error(ss.grade_error)
    report: grading.GradeReport | None = ss.get("grade_report")
    if report is not None:
        _report(report)
    _probe_panel(rubric)


def _probe_panel(rubric: MultiStepRubric) -> None:
    ss = st.session_state
    st.subheader("Probe: what trivial policies earn")
    reason = optional_features.available(optional_features.PROBE)
    if reason is None and not state.scenarios():
        reason = "load or add scenarios first (Scenarios section): the probe plays them"
    st.number_input("Turns per rollout", min_value=1, max_value=20, value=6, key="probe_turns")
    st.button(
        "Probe the rubric with trivial policies",
        key="grade_probe",
        disabled=reason is not None,
        help=reason or "empty, echo, majority and every-phrase policies, and the ideal one",
        on_click=_probe,
        args=(rubric,),
    )
    if reason is not None:
        st.caption(f"probe unavailable: {reason}")
    if "probe_result" in ss:
        st.markdown(ss.probe_result)


def _probe(rubric: MultiStepRubric) -> None:
    ss = st.session_state
    try:
        ss.probe_result = optional_features.run_probe(
            rubric, state.scenarios(), int(ss.get("probe_turns", 6))
        )
    except Exception as exc:  # shown as is
        ss.probe_result = f"probe failed: {type(exc).__name__}: {exc}"


def _report(report: grading.GradeReport) -> None:
    result = report.result
    c1, c2, c3 = st.columns(3)
    c1.metric("reward (the rubric's strategy)", f"{report.reward:.3f}")
    c2.metric("depth reached", result.depth)
    c3.metric("stop reason", str(result.stop_reason))
    st.markdown("**Path taken**: " + (" → ".join(result.path) or "(none)"))
    st.markdown("**Ideal path** (every ground-truth step): " + (" → ".join(report.ideal_path) or "(none)"))
    verdicts = [
        {
            "requirement": r.name,
            "level": r.level,
            "judged": "no match"
            if r.answer is None
            else fmt(r.answer)
            if not isinstance(r.answer, list)
            else str(r.answer),
            "truth": fmt(r.truth) if not isinstance(r.truth, list) else str(r.truth),
            "correct": "yes" if r.correct else "no",
            "judge": r.judge,
            "reasoning": r.reasoning,
        }
        for r in result.results
    ]
    st.dataframe(pd.DataFrame(verdicts), hide_index=True, width="stretch")
    for name, text in report.reveals:
        st.info(f"revealed after **{name}**: {text}")
    rewards = [
        {
            "strategy": r.strategy + (" (this rubric)" if r.current else ""),
            "normalised": round(r.normalized, 4),
            "raw": round(r.raw, 4),
            "ideal raw": round(r.ideal_raw, 4),
        }
        for r in report.rewards
    ]
    st.markdown("**Reward under every strategy**")
    st.dataframe(pd.DataFrame(rewards), hide_index=True, width="stretch")
