"""The app's main flows, section by section, through Streamlit's app-testing API (no browser)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

pytest.importorskip("streamlit")

from streamlit.testing.v1 import AppTest

from envs.gui import optional_features, page_requirements
from rubrics.multistep.rubric_io import load_rubric, load_scenarios, rubric_from_dict, rubric_to_dict

from .app_driver import go, start, texts
from .conftest import ROOT


def add_requirement(at: AppTest, name: str, yes: str, no: str, unlock_yes=(), unlock_no=()) -> None:  # type: ignore[no-untyped-def]
    at.text_input(key="ef_name").set_value(name)
    at.text_area(key="ef_question").set_value(f"Does the reply handle {name}?")
    at.text_area(key="ef_rule_1_any").set_value(yes)
    at.text_area(key="ef_rule_0_any").set_value(no)
    at.multiselect(key="ef_dep_1").set_value(list(unlock_yes))
    at.multiselect(key="ef_dep_0").set_value(list(unlock_no))
    at.button(key="edit_apply").click().run()
    assert not at.exception, at.exception
    assert f"added requirement '{name}'" in texts(at.success)


def build_branching(at: AppTest) -> None:
    go(at, "Rubric")
    at.button(key="rubric_new").click().run()
    go(at, "Requirements")
    add_requirement(at, "gloves", "gloves", "no gloves")
    add_requirement(at, "police", "police", "no police")
    add_requirement(at, "scene_safe", "scene is safe", "unsafe", ["gloves"], ["police"])


def test_rubric_open_and_save_is_lossless(monkeypatch: pytest.MonkeyPatch, workdir: Path) -> None:
    at = start(monkeypatch, workdir, "rubrics/first_responder.yaml")
    assert any("loaded rubrics/first_responder.yaml: 22 requirements" in t for t in texts(at.success))
    assert at.text_input(key="rubric_save_path").value == ""  # "Save as" never starts on the opened file
    at.text_input(key="rubric_save_path").set_value("saved.yaml").run()
    at.button(key="rubric_save_as").click().run()
    assert "saved saved.yaml (comments and layout kept)" in texts(at.success)
    assert (workdir / "saved.yaml").read_text() == (workdir / "rubrics" / "first_responder.yaml").read_text()
    original = rubric_to_dict(load_rubric(ROOT / "configs" / "rubrics" / "first_responder.yaml"))
    assert rubric_to_dict(load_rubric(workdir / "saved.yaml")) == original
    # traversal is refused and nothing is written outside
    at.text_input(key="rubric_save_path").set_value("../escape.yaml").run()
    at.button(key="rubric_save_as").click().run()
    assert any("outside the working directory" in t for t in texts(at.error))
    assert not (workdir.parent / "escape.yaml").exists()
    # open another file from the working directory
    at.selectbox(key="rubric_open").set_value("rubrics/incident_triage.yaml").run()
    at.button(key="rubric_load").click().run()
    assert any("15 requirements" in t for t in texts(at.success))


def test_requirements_add_edit_rename_delete_with_live_validation(
    monkeypatch: pytest.MonkeyPatch, workdir: Path
) -> None:
    at = start(monkeypatch, workdir)
    go(at, "Rubric")
    at.button(key="rubric_new").click().run()
    assert at.button(key="rubric_save").disabled  # an empty rubric is invalid: nothing to save
    build_branching(at)
    doc = at.session_state.doc
    assert [r["name"] for r in doc["requirements"]] == ["gloves", "police", "scene_safe"]
    assert doc["requirements"][2]["dependencies"] == {1.0: ["gloves"], 0.0: ["police"]}
    assert "valid · 3 requirements" in texts(at.sidebar.success)
    # edit in place: rename gloves; the root's dependency follows
    at.selectbox(key="edit_target").set_value("gloves").run()
    assert at.text_input(key="ef_name").value == "gloves"
    at.text_input(key="ef_name").set_value("ppe")
    at.button(key="edit_apply").click().run()
    assert any("renamed 'gloves' to 'ppe' everywhere" in t for t in texts(at.success))
    assert at.session_state.doc["requirements"][2]["dependencies"] == {1.0: ["ppe"], 0.0: ["police"]}
    # a cycle: the library's message appears next to the dependency pickers of the requirement
    at.selectbox(key="edit_target").set_value("ppe").run()
    at.multiselect(key="ef_dep_1").set_value(["scene_safe"])
    at.button(key="edit_apply").click().run()
    assert any("cycle" in t and "scene_safe" in t for t in texts(at.error))
    assert "invalid" in texts(at.sidebar.error)[0]
    go(at, "Rubric")
    assert at.button(key="rubric_save").disabled
    go(at, "Requirements")
    at.selectbox(key="edit_target").set_value("ppe").run()
    at.multiselect(key="ef_dep_1").set_value([])
    at.button(key="edit_apply").click().run()
    assert not at.error
    # delete police: the root's branch is emptied with it
    at.selectbox(key="edit_target").set_value("police").run()
    at.button(key="edit_delete").click().run()
    assert [r["name"] for r in at.session_state.doc["requirements"]] == ["ppe", "scene_safe"]
    assert at.session_state.doc["requirements"][1]["dependencies"] == {1.0: ["ppe"], 0.0: []}


def test_judges_and_strategy(monkeypatch: pytest.MonkeyPatch, workdir: Path) -> None:
    at = start(monkeypatch, workdir, "rubrics/incident_triage.yaml")
    go(at, "Judges & strategy")
    at.text_input(key="new_judge_name").set_value("grader")
    at.selectbox(key="new_judge_type").set_value("llm")
    at.button(key="judge_add").click().run()
    assert at.session_state.doc["judges"]["grader"]["type"] == "llm"
    rev = at.session_state.rev
    at.text_input(key=f"judge_{rev}_grader_model").set_value("qwen")
    at.button(key=f"judge_save_{rev}_grader").click().run()
    assert at.session_state.doc["judges"]["grader"]["model"] == "qwen"
    at.selectbox(key=f"strategy_type_{rev}").set_value("progressive").run()
    at.number_input(key=f"strategy_growth_{rev}").set_value(2.0).run()
    at.checkbox(key=f"strategy_normalized_{rev}").uncheck().run()
    assert at.session_state.doc["reward_strategy"] == {
        "type": "progressive",
        "normalized": False,
        "growth": 2.0,
    }
    at.selectbox(key=f"default_judge_{rev}").set_value("grader").run()
    assert at.session_state.doc["default_judge"] == "grader"


def test_dag_view_and_path_explorer(monkeypatch: pytest.MonkeyPatch, workdir: Path) -> None:
    at = start(monkeypatch, workdir, "rubrics/first_responder.yaml")
    go(at, "DAG & paths")
    metrics = {m.label: m.value for m in at.metric}
    rubric = load_rubric(workdir / "rubrics" / "first_responder.yaml")
    assert metrics["requirements"] == "22" and metrics["levels"] == str(rubric.graph.depth)
    assert metrics["paths"] == str(rubric.graph.count_paths())
    assert any("data:image/svg+xml;base64," in m.value for m in at.markdown)
    at.number_input(key="dag_limit").set_value(3).run()
    assert len(at.dataframe[1].value) == 3
    at.selectbox(key="dag_through").set_value("naloxone_indicated").run()
    paths = list(at.dataframe[1].value["path"])
    assert paths and all("naloxone_indicated" in p for p in paths)


def test_grade_a_reply_under_every_strategy(monkeypatch: pytest.MonkeyPatch, workdir: Path) -> None:
    at = start(monkeypatch, workdir)
    build_branching(at)
    go(at, "Grade a reply")
    at.text_input(key="grade_truth_scene_safe").set_value("1")
    at.text_input(key="grade_truth_gloves").set_value("1")
    at.text_area(key="grade_reply").set_value("The scene is safe, so I go in. I forget my hat.")
    at.button(key="grade_run").click().run()
    assert not at.error, texts(at.error)
    # scene_safe (level 0) correct; gloves (level 1): neither "gloves" nor "no gloves" appears -> incorrect
    # level_weighted: raw 1 (level 0) of ideal 1 + 1.5 = 2.5 -> 0.4
    assert at.metric[0].value == "0.400"
    rewards = at.dataframe[1].value.set_index("strategy")
    assert len(rewards) == 6
    assert rewards.loc["level_weighted (this rubric)", "normalised"] == pytest.approx(0.4)
    assert rewards.loc["mean", "normalised"] == pytest.approx(0.5)
    assert rewards.loc["progressive", "raw"] == pytest.approx(1.0)
    assert any("scene_safe" in m.value for m in at.markdown if m.value.startswith("**Path taken**"))


def test_scenarios_edit_load_save(monkeypatch: pytest.MonkeyPatch, workdir: Path) -> None:
    rubric = load_rubric(workdir / "rubrics" / "first_responder.yaml")
    original = load_scenarios(workdir / "scenarios" / "first_responder.yaml", rubric)
    first = original[0]
    at = start(monkeypatch, workdir, "rubrics/first_responder.yaml")
    go(at, "Scenarios")
    at.selectbox(key="sc_open").set_value("scenarios/first_responder.yaml").run()
    at.button(key="sc_load").click().run()
    assert f"{len(original)} scenarios" in " ".join(m.value for m in at.markdown)
    at.selectbox(key="sc_target").set_value(first.name).run()
    truth = at.text_input(key="sf_answer_scene_safety").value
    assert float(truth) == first.answers["scene_safety"]["answer"]
    at.text_input(key="sf_answer_scene_safety").set_value("7")  # outside the binary domain
    at.button(key="sc_apply").click().run()
    assert any("scene_safety" in t for t in texts(at.error))
    at.text_input(key="sc_save_path").set_value("mine.yaml")
    at.button(key="sc_save").click().run()
    assert not (workdir / "mine.yaml").exists()  # an invalid scenario is not saved
    at.text_input(key="sf_answer_scene_safety").set_value(truth)
    at.text_input(key="sf_description").set_value("edited in the app")
    at.button(key="sc_apply").click().run()
    assert not at.error
    at.button(key="sc_save").click().run()
    saved = load_scenarios(workdir / "mine.yaml", rubric)
    assert len(saved) == len(original) and saved[0].description == "edited in the app"
    assert [s.answers for s in saved] == [s.answers for s in original]


def test_scenario_added_in_the_app_grades_with_its_reveals(
    monkeypatch: pytest.MonkeyPatch, workdir: Path
) -> None:
    at = start(monkeypatch, workdir)
    build_branching(at)
    go(at, "Scenarios")
    at.text_input(key="sf_name").set_value("crash")
    at.text_area(key="sf_prompt").set_value("A car hit a pole. What do you do?")
    at.text_input(key="sf_answer_scene_safe").set_value("1")
    at.text_input(key="sf_reveal_scene_safe").set_value("The driver waves at you.")
    at.text_input(key="sf_answer_gloves").set_value("1")
    at.button(key="sc_apply").click().run()
    assert at.session_state.scenarios == [
        {
            "name": "crash",
            "prompt": "A car hit a pole. What do you do?",
            "answers": {"scene_safe": {"answer": 1.0}, "gloves": {"answer": 1.0}},
            "revealed_info": {"scene_safe": "The driver waves at you."},
        }
    ]
    go(at, "Grade a reply")
    at.selectbox(key="grade_source").set_value("crash").run()
    assert at.text_area(key="grade_prompt").value == "A car hit a pole. What do you do?"
    at.text_area(key="grade_reply").set_value("The scene is safe. Gloves on, then I check the driver.")
    at.button(key="grade_run").click().run()
    assert at.metric[0].value == "1.000"
    assert "revealed after **scene_safe**: The driver waves at you." in texts(at.info)


def test_probe_and_generation_buttons(monkeypatch: pytest.MonkeyPatch, workdir: Path) -> None:
    at = start(monkeypatch, workdir)
    build_branching(at)
    go(at, "Scenarios")
    button = at.button(key="sc_generate")
    assert button.disabled  # no endpoint yet (or no synthetic pipeline): a disabled button with the reason
    reason = optional_features.available(optional_features.SYNTH) or "give an endpoint and a model"
    assert any(reason in c.value for c in at.caption)
    go(at, "Grade a reply")
    assert at.button(key="grade_probe").disabled  # nothing to play yet
    at = start(monkeypatch, workdir, "rubrics/first_responder.yaml")
    go(at, "Scenarios")
    at.selectbox(key="sc_open").set_value("scenarios/first_responder.yaml").run()
    at.button(key="sc_load").click().run()
    if (
        optional_features.available(optional_features.SYNTH) is None
    ):  # the rubric's LLM judge's endpoint is offered
        assert at.text_input(key="gen_base_url").value == "http://127.0.0.1:8001/v1"
        assert not at.button(key="sc_generate").disabled
    go(at, "Grade a reply")
    if optional_features.available(optional_features.PROBE) is not None:
        assert at.button(key="grade_probe").disabled
        return
    at.button(key="grade_probe").click().run()
    table = " ".join(m.value for m in at.markdown)
    n = len(at.session_state.scenarios)
    assert f"| ideal | 1.000 ± 0.000 ({n} on {n})" in table and "| empty | 0.000" in table


def name_column(at: AppTest):  # type: ignore[no-untyped-def]
    """The column holding the editor's Name field."""
    return next(c for c in at.columns if any(t.key == "ef_name" for t in c.text_input))


def test_an_empty_or_invalid_name_is_refused_under_the_name_field(
    monkeypatch: pytest.MonkeyPatch, workdir: Path
) -> None:
    at = start(monkeypatch, workdir, "rubrics/first_responder.yaml")
    go(at, "Requirements")
    before = at.session_state.doc
    at.selectbox(key="edit_target").set_value("hazard_type").run()
    for bad, says in [("", "a requirement needs a name"), ("2nd check", "'2nd check' is not a valid name")]:
        at.text_input(key="ef_name").set_value(bad)
        at.button(key="edit_apply").click().run()
        assert not at.exception, at.exception
        assert at.session_state.doc == before  # nothing renamed, no '' written into a dependency list
        assert not any("renamed" in t for t in texts(at.success))
        assert any(says in t and "nothing was changed" in t for t in texts(name_column(at).error))
        assert at.session_state.edit_target == "hazard_type"
    # a valid name clears the refusal and renames as before
    at.text_input(key="ef_name").set_value("hazard_kind")
    at.button(key="edit_apply").click().run()
    assert not name_column(at).error
    assert any("renamed 'hazard_type' to 'hazard_kind' everywhere" in t for t in texts(at.success))
    # adding a requirement without a name is refused the same way
    at.selectbox(key="edit_target").set_value("(new requirement)").run()
    at.text_area(key="ef_question").set_value("Anything?")
    at.button(key="edit_apply").click().run()
    assert any("a requirement needs a name" in t for t in texts(name_column(at).error))
    assert len(at.session_state.doc["requirements"]) == len(before["requirements"])


def test_a_new_requirement_is_unlocked_where_the_author_says_and_a_new_root_is_announced(
    monkeypatch: pytest.MonkeyPatch, workdir: Path
) -> None:
    at = start(monkeypatch, workdir)
    build_branching(at)
    assert not at.warning  # scene_safe took over from gloves and police: one root, no warning
    # "Unlocked by" offers every answer of the other requirements, by option name
    at.text_input(key="ef_name").set_value("bandage")
    at.text_area(key="ef_question").set_value("Is the wound dressed?")
    at.text_area(key="ef_rule_1_any").set_value("bandage")
    assert "gloves: 1 (yes)" in at.multiselect(key="ef_parents").options
    assert any("it will be a root beside scene_safe" in c.value for c in at.caption)
    at.multiselect(key="ef_parents").set_value(["gloves=1"])
    at.button(key="edit_apply").click().run()
    assert "added requirement 'bandage'" in texts(at.success) and not at.warning
    doc = at.session_state.doc
    assert doc["requirements"][0]["dependencies"] == {1.0: ["bandage"]}  # gloves, yes -> bandage
    rubric = rubric_from_dict(doc, "rubric")
    assert list(rubric.graph.roots) == ["scene_safe"] and rubric.graph.levels["bandage"] == 2
    # one left unlocked by nothing becomes a second root, and the app says so
    at.text_input(key="ef_name").set_value("radio")
    at.text_area(key="ef_question").set_value("Radio in?")
    at.text_area(key="ef_rule_1_any").set_value("radio")
    at.button(key="edit_apply").click().run()
    assert any("'radio' is now a root" in t and "2 roots" in t for t in texts(at.warning))
    # editing: the parents are shown, and cutting the last one (police's) is announced too
    at.selectbox(key="edit_target").set_value("police").run()
    assert at.multiselect(key="ef_parents").value == ["scene_safe=0"]
    at.multiselect(key="ef_parents").set_value([])
    at.button(key="edit_apply").click().run()
    assert any("'police' is now a root" in t for t in texts(at.warning))
    assert at.session_state.doc["requirements"][2]["dependencies"] == {
        1.0: ["gloves"]
    }  # scene_safe, no -> (end)


def test_rules_as_users_write_them_and_dag_labels_with_option_names(
    monkeypatch: pytest.MonkeyPatch, workdir: Path
) -> None:
    at = start(monkeypatch, workdir, "rubrics/first_responder.yaml")
    go(at, "Requirements")
    at.selectbox(key="edit_target").set_value("hazard_type").run()
    regex = at.text_area(key="ef_rule_0_regex")  # a long pattern in a multi-line box, not a one-line input
    assert len(regex.value) > 150
    phrases = at.text_area(key="ef_rule_0_any")
    assert len(phrases.value.splitlines()) > 3
    assert page_requirements._box_height(phrases.value) > 4 * 24  # the box is sized to show them all
    # a pattern broken over lines for reading is one pattern; a broken pattern is named under its box
    at.text_area(key="ef_rule_0_regex").set_value("\\b(assailants?|attackers?\n|weapons?)\\b")
    at.button(key="edit_apply").click().run()
    rules = next(r for r in at.session_state.doc["requirements"] if r["name"] == "hazard_type")["rules"]
    assert rules[0.0]["regex"] == "\\b(assailants?|attackers?|weapons?)\\b"
    at.text_area(key="ef_rule_0_regex").set_value("(unclosed").run()
    assert any("the regex does not compile" in t for t in texts(at.error))
    go(at, "DAG & paths")
    branches = at.dataframe[0].value
    answers = set(branches[branches["requirement"] == "scene_safety"]["answer"])
    assert answers == {"1 (yes)", "0 (no)"}
    svg = next(m.value for m in at.markdown if "data:image/svg+xml;base64," in m.value)
    drawing = base64.b64decode(svg.split("base64,")[1].split('"')[0]).decode()
    assert ">1 yes</text>" in drawing and ">0 no</text>" in drawing and ">any answer</text>" in drawing


def test_grade_against_a_chosen_scenarios_ground_truth(
    monkeypatch: pytest.MonkeyPatch, workdir: Path
) -> None:
    rubric = load_rubric(workdir / "rubrics" / "first_responder.yaml")
    first = load_scenarios(workdir / "scenarios" / "first_responder.yaml", rubric)[0]
    at = start(monkeypatch, workdir, "rubrics/first_responder.yaml")
    go(at, "Grade a reply")
    at.selectbox(key="grade_sc_open").set_value("scenarios/first_responder.yaml").run()
    at.button(key="grade_sc_load").click().run()
    assert at.selectbox(key="grade_source").value == first.name  # loaded here, the first one chosen
    at.text_area(key="grade_reply").set_value("The scene is safe, so I approach.")
    at.button(key="grade_run").click().run()
    assert not at.error, texts(at.error)
    assert any(m.value.startswith("**Ideal path**") and "scene_safety" in m.value for m in at.markdown)
    at.button(key="grade_copy").click().run()  # the answers, editable
    assert at.selectbox(key="grade_source").value == "(ground truth typed here)"
    expected = first.answers["scene_safety"]["answer"]
    assert float(at.text_input(key="grade_truth_scene_safety").value) == expected
