"""The Judges & strategy section: rule and LLM judges with their settings, the default judge, and the
reward strategy with its parameters."""

from __future__ import annotations

from typing import Any

import streamlit as st

from envs.gui import document, state
from rubrics.judges.endpoint import LOCAL_JUDGE
from rubrics.multistep.strategies import PARAMS, STRATEGIES

LLM_FIELDS: dict[str, Any] = {**LOCAL_JUDGE.model_dump(), "api_key_env": ""}
"""An LLM judge's settings (``JudgeEndpoint``'s fields, in order) and the values a new one starts with (the
local judge's; no key variable is written as "")."""


def _key(name: str, field: str) -> str:
    return f"judge_{state.rev()}_{name}_{field}"


def _save_judge(name: str) -> None:
    ss = st.session_state
    new_name = str(ss.get(_key(name, "name")) or "").strip()
    kind = ss.get(_key(name, "type"), "rules")
    settings: dict[str, Any] = {"type": kind}
    if kind == "llm":
        for field, default in LLM_FIELDS.items():
            value = ss.get(_key(name, field), default)
            if isinstance(default, str):
                value = str(value or "").strip()
                if not value and field == "api_key_env":
                    continue
            elif isinstance(default, int):
                value = int(value)
            else:
                value = float(value)
            settings[field] = value
    try:
        state.set_doc(document.set_judge(state.doc(), new_name, settings, old_name=name))
    except ValueError as exc:
        state.flash("error", str(exc))
        return
    state.flash("success", f"saved judge {new_name!r}")


def _delete_judge(name: str) -> None:
    try:
        state.set_doc(document.delete_judge(state.doc(), name))
    except ValueError as exc:
        state.flash("error", str(exc))
        return
    state.flash("success", f"deleted judge {name!r}")


def _add_judge() -> None:
    ss = st.session_state
    name = str(ss.get("new_judge_name") or "").strip()
    kind = ss.get("new_judge_type", "rules")
    if not name:
        state.flash("error", "a judge needs a name")
        return
    if name in (state.doc().get("judges") or {}):
        state.flash("error", f"a judge called {name!r} already exists")
        return
    settings: dict[str, Any] = {"type": kind}
    if kind == "llm":
        settings.update({"base_url": LLM_FIELDS["base_url"], "model": LLM_FIELDS["model"]})
    state.set_doc(document.set_judge(state.doc(), name, settings))
    state.flash("success", f"added {kind} judge {name!r}")


def _default_judge() -> None:
    doc = dict(state.doc())
    doc["default_judge"] = st.session_state.get(f"default_judge_{state.rev()}")
    state.set_doc(doc)


def _strategy() -> None:
    ss, rev = st.session_state, state.rev()
    kind = ss.get(f"strategy_type_{rev}", "level_weighted")
    params = {p: ss.get(f"strategy_{p}_{rev}", d) for p, d in PARAMS.get(kind, {}).items()}
    state.set_doc(
        document.set_strategy(state.doc(), kind, bool(ss.get(f"strategy_normalized_{rev}")), params)
    )


def render() -> None:
    """Draw the section."""
    doc, rev = state.doc(), state.rev()
    _, issues = state.built()
    st.header("Judges")
    judges: dict[str, Any] = dict(doc.get("judges") or {})
    for issue in issues:
        if "judge" in issue.message and not issue.requirement:
            st.error(issue.message)
    for name, settings in judges.items():
        _judge(name, settings, rev, deletable=len(judges) > 1)
    _new_and_default_judge(doc, rev, judges)
    _strategy_editor(doc, rev)


def _judge(name: str, settings: dict[str, Any], rev: int, deletable: bool) -> None:
    """One judge's editor: its name, kind and settings, Save and Delete."""
    with st.expander(f"{name} ({settings.get('type')})", expanded=True):
        c1, c2 = st.columns(2)
        c1.text_input("Judge name", value=name, key=_key(name, "name"))
        c2.selectbox(
            "Kind",
            ["rules", "llm"],
            index=["rules", "llm"].index(settings.get("type", "rules")),
            key=_key(name, "type"),
        )
        if st.session_state.get(_key(name, "type")) == "llm":
            _llm_settings(name, settings, c1, c2)
        else:
            st.caption("matches each requirement's own rules offline (whole words, case-insensitive)")
        b1, b2 = st.columns(2)
        b1.button("Save judge", key=f"judge_save_{rev}_{name}", on_click=_save_judge, args=(name,))
        b2.button(
            "Delete judge",
            key=f"judge_delete_{rev}_{name}",
            on_click=_delete_judge,
            args=(name,),
            disabled=not deletable,
        )


def _llm_settings(name: str, settings: dict[str, Any], c1: Any, c2: Any) -> None:
    """An LLM judge's endpoint, model, key variable, concurrency, timeout and attempts."""
    c1.text_input(
        "Endpoint (OpenAI-compatible base URL)",
        value=str(settings.get("base_url", LLM_FIELDS["base_url"])),
        key=_key(name, "base_url"),
    )
    c2.text_input("Model", value=str(settings.get("model", LLM_FIELDS["model"])), key=_key(name, "model"))
    c1.text_input(
        "Environment variable holding the API key (never the key)",
        value=str(settings.get("api_key_env", "")),
        key=_key(name, "api_key_env"),
    )
    c2.number_input(
        "Max concurrent requests",
        min_value=1,
        value=int(settings.get("max_concurrency", LLM_FIELDS["max_concurrency"])),
        key=_key(name, "max_concurrency"),
    )
    c1.number_input(
        "Timeout per request (s)",
        min_value=0.1,
        value=float(settings.get("timeout_s", LLM_FIELDS["timeout_s"])),
        key=_key(name, "timeout_s"),
    )
    c2.number_input(
        "Attempts per verdict",
        min_value=1,
        value=int(settings.get("max_attempts", LLM_FIELDS["max_attempts"])),
        key=_key(name, "max_attempts"),
    )


def _new_and_default_judge(doc: document.Doc, rev: int, judges: dict[str, Any]) -> None:
    """Add a judge; choose the default one."""
    c1, c2, c3 = st.columns([2, 1, 1])
    c1.text_input("New judge name", key="new_judge_name")
    c2.selectbox("Kind of the new judge", ["rules", "llm"], key="new_judge_type")
    c3.button("Add judge", key="judge_add", on_click=_add_judge)
    names = list(judges)
    default = doc.get("default_judge")
    st.selectbox(
        "Default judge (for requirements that name none)",
        names,
        index=names.index(default) if default in names else 0,
        key=f"default_judge_{rev}",
        on_change=_default_judge,
    )


def _strategy_editor(doc: document.Doc, rev: int) -> None:
    """The reward strategy, its normalisation and its parameters."""
    st.header("Reward strategy")
    strategy = document.strategy_of(doc)
    kinds = list(STRATEGIES)
    c1, c2 = st.columns(2)
    c1.selectbox(
        "Strategy",
        kinds,
        index=kinds.index(strategy["type"]) if strategy["type"] in kinds else 0,
        key=f"strategy_type_{rev}",
        on_change=_strategy,
    )
    c2.checkbox(
        "Normalised by the ideal walk (reward in [0, 1])",
        value=bool(strategy.get("normalized", True)),
        key=f"strategy_normalized_{rev}",
        on_change=_strategy,
    )
    current = st.session_state.get(f"strategy_type_{rev}", strategy["type"])
    for param, default_value in PARAMS.get(current, {}).items():
        st.number_input(
            param,
            min_value=0.001,
            value=float(strategy.get(param, default_value))
            if current == strategy["type"]
            else float(default_value),
            key=f"strategy_{param}_{rev}",
            on_change=_strategy,
        )
    st.caption(
        "level_weighted: Σ correct·(1 + level_bonus·level) · progressive: Σ correct·growth^level · "
        "mean: share of judged correct · sum: count correct · level_based: deepest level reached + 1 · "
        "completion_ratio: share of the ground-truth path. The Grade section shows a reply's reward under "
        "all of them."
    )
