"""The builder's editing logic: lossless load/save, the requirement editor's fields, rename and delete
everywhere, judges and strategy, and validation messages placed on the requirement and field they name."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from envs.gui import document, editor, scenario_doc
from rubrics.multistep.io import load_rubric, rubric_to_dict

from .conftest import ROOT, branching_requirements

EXAMPLES = ["first_responder", "incident_triage"]


def small_doc() -> document.Doc:
    doc = document.new_document("small")
    for req in branching_requirements():
        doc = document.add_requirement(doc, req)
    return doc


@pytest.mark.parametrize("name", EXAMPLES)
def test_library_file_round_trips_through_the_app_unchanged(name: str, tmp_path: Path) -> None:
    source = ROOT / "configs" / "rubrics" / f"{name}.yaml"
    doc = document.load_document(str(source))
    # every requirement through the editor's form fields and back, as "Apply" without edits does
    for req in doc["requirements"]:
        assert editor.requirement_from_fields(editor.fields_from_requirement(req)) == req
    document.save_document(doc, str(tmp_path / "saved.yaml"))
    original = rubric_to_dict(load_rubric(source))
    assert rubric_to_dict(load_rubric(tmp_path / "saved.yaml")) == original
    assert yaml.safe_load((tmp_path / "saved.yaml").read_text()) == original


@pytest.mark.parametrize("name", EXAMPLES)
def test_scenarios_round_trip_through_the_editor(name: str) -> None:
    doc = document.load_document(str(ROOT / "configs" / "rubrics" / f"{name}.yaml"))
    rubric, _ = document.build(doc)
    scenarios = scenario_doc.load(str(ROOT / "configs" / "scenarios" / f"{name}.yaml"), rubric)
    names = document.names(doc)
    for data in scenarios:
        assert (
            scenario_doc.scenario_from_fields(scenario_doc.fields_from_scenario(data, names), names) == data
        )
    assert scenario_doc.problems(scenarios, rubric) == {}


def test_editor_fields_of_every_requirement_type() -> None:
    reqs = [
        {
            "name": "sev",
            "type": "discrete",
            "question": "How severe?",
            "options": [{"value": 0.0, "meaning": "low"}, {"value": 2.5, "meaning": "a: b"}],
            "dependencies": {2.5: ["next"]},
            "rules": {0.0: {"all": ["minor", "fine"], "regex": "\\blow\\b"}},
        },
        {
            "name": "dose",
            "type": "continuous",
            "question": "Dose?",
            "low": -1.0,
            "high": 3.0,
            "tolerance": 0.25,
            "dependencies": {-0.5: ["next"], 2.0: ["other"]},
        },
        {
            "name": "kind",
            "type": "unit_vector",
            "question": "Which?",
            "labels": ["a", "b"],
            "dependencies": {1: ["x"]},
        },
    ]
    for req in reqs:
        fields = editor.fields_from_requirement(req)
        assert editor.requirement_from_fields(fields) == req
    assert [s.key for s in editor.slots(editor.fields_from_requirement(reqs[1]))] == ["m0_5", "2"]
    with pytest.raises(editor.FieldError, match="value: meaning"):
        editor.requirement_from_fields({**editor.fields_from_requirement(reqs[0]), "options": "high: x"})


def test_rename_updates_every_reference() -> None:
    doc = small_doc()
    doc["roots"] = ["scene_safe"]
    scenarios = [
        {
            "name": "s",
            "prompt": "p",
            "answers": {"scene_safe": {"answer": 1.0}, "gloves": {"answer": 1.0}},
            "revealed_info": {"scene_safe": "you go in"},
        }
    ]
    req = {**document.find(doc, "scene_safe"), "name": "scene_ok"}
    new, renamed = document.replace_requirement(doc, "scene_safe", req, scenarios)
    assert document.names(new) == ["scene_ok", "gloves", "police"]
    assert new["roots"] == ["scene_ok"]
    assert renamed[0]["answers"].keys() == {"scene_ok", "gloves"}
    assert renamed[0]["revealed_info"] == {"scene_ok": "you go in"}
    # a child renamed: the parent's dependency lists follow
    new, _ = document.rename_requirement(new, "gloves", "ppe")
    assert document.find(new, "scene_ok")["dependencies"] == {1.0: ["ppe"], 0.0: ["police"]}
    assert document.build(new)[0] is not None
    assert doc["roots"] == ["scene_safe"]  # edits return new documents
    with pytest.raises(ValueError, match="already exists"):
        document.replace_requirement(new, "ppe", {**document.find(new, "ppe"), "name": "police"})


def test_delete_removes_every_reference() -> None:
    doc = small_doc()
    scenarios = [{"prompt": "p", "answers": {"scene_safe": {"answer": 1.0}, "police": {"answer": 0.0}}}]
    new, kept = document.delete_requirement(doc, "police", scenarios)
    assert document.names(new) == ["scene_safe", "gloves"]
    assert document.find(new, "scene_safe")["dependencies"] == {1.0: ["gloves"], 0.0: []}
    assert kept[0]["answers"] == {"scene_safe": {"answer": 1.0}}
    assert document.build(new)[1] == []


def test_validation_names_the_requirement_and_field() -> None:
    doc = small_doc()
    doc["requirements"][1]["dependencies"] = {1.0: ["scene_safe"]}  # gloves -> scene_safe: a cycle
    rubric, issues = document.build(doc)
    assert rubric is None
    assert issues[0].field == "dependencies"
    assert issues[0].requirement in {"scene_safe", "gloves"}
    assert "cycle" in issues[0].message and "scene_safe" in issues[0].message
    doc = small_doc()
    doc["requirements"][2]["name"] = "not an identifier"
    _, issues = document.build(doc)
    assert issues[0].requirement == "not an identifier" and "identifier" in issues[0].message
    assert issues[0].field == "name"
    doc = small_doc()
    doc["requirements"][2].pop("rules")
    _, issues = document.build(doc)
    assert (issues[0].requirement, issues[0].field) == ("police", "judge")
    doc = small_doc()
    doc["roots"] = ["scene_safe"]
    doc["requirements"].append(
        {"name": "orphan", "type": "binary", "question": "?", "rules": {1.0: {"any": ["x"]}}}
    )
    rubric, issues = document.build(doc)
    assert rubric is not None and [(i.requirement, i.warning) for i in issues] == [("orphan", True)]


def test_unsaved_invalid_document_is_not_written(tmp_path: Path) -> None:
    doc = document.new_document()
    with pytest.raises(ValueError, match="requirements"):
        document.save_document(doc, str(tmp_path / "x.yaml"))
    assert not (tmp_path / "x.yaml").exists()


def test_judges_and_strategy() -> None:
    doc = small_doc()
    doc = document.set_judge(
        doc, "llm", {"type": "llm", "base_url": "http://h/v1", "model": "m", "max_attempts": 5}
    )
    assert doc["judges"]["llm"] == {
        "type": "llm",
        "base_url": "http://h/v1",
        "model": "m",
    }  # defaults left out
    doc["requirements"][1]["judge"] = "rules"
    doc = document.set_judge(doc, "keywords", {"type": "rules"}, old_name="rules")
    assert doc["default_judge"] == "keywords" and doc["requirements"][1]["judge"] == "keywords"
    assert "rules" not in doc["judges"]
    doc = document.delete_judge(doc, "keywords")
    assert doc["default_judge"] == "llm" and "judge" not in doc["requirements"][1]
    doc = document.set_strategy(small_doc(), "progressive", False, {"growth": 2, "level_bonus": 9})
    assert doc["reward_strategy"] == {"type": "progressive", "normalized": False, "growth": 2.0}
    rubric, _ = document.build(doc)
    assert rubric is not None and rubric.reward_strategy.params == {"growth": 2.0}


def test_set_parents_and_roots() -> None:
    doc = {"requirements": branching_requirements()}
    assert document.roots(doc) == ["scene_safe"]
    doc = document.add_requirement(doc, {"name": "bandage", "question": "Dressed?"})
    assert document.roots(doc) == ["scene_safe", "bandage"]  # nothing unlocks it yet
    doc = document.set_parents(doc, "bandage", [("gloves", 1.0), ("police", 0.0)])
    assert document.roots(doc) == ["scene_safe"]
    assert document.parents(doc, "bandage") == [("gloves", 1.0), ("police", 0.0)]
    assert document.find(doc, "gloves")["dependencies"] == {1.0: ["bandage"]}
    doc = document.set_parents(doc, "bandage", [("gloves", 1.0)])
    assert "dependencies" not in document.find(doc, "police")  # the emptied branch is removed
    doc = document.set_parents(doc, "gloves", [])
    assert document.roots(doc) == ["scene_safe", "gloves"]
    assert document.find(doc, "scene_safe")["dependencies"] == {0.0: ["police"]}


def test_dag_edge_labels_name_the_options() -> None:
    from envs.gui.dag_labels import edge_labels, labelled_svg
    from rubrics.multistep.show import to_svg

    source = ROOT / "configs" / "rubrics" / "incident_triage.yaml"
    rubric, doc = load_rubric(source), document.load_document(str(source))
    labels = edge_labels(rubric, doc)
    assert ("0", "0: no customer impact int…") in labels  # a discrete option's meaning, shortened
    svg = labelled_svg(rubric, doc)
    assert svg != to_svg(rubric) and ">0: no customer impact int…</text>" in svg
    assert labelled_svg(rubric, {"requirements": []}).count("<text") == to_svg(rubric).count("<text")


def test_a_rules_negation_switch_survives_the_editor() -> None:
    """A rule with ``negation_aware: false`` keeps it through the editor's fields (it was dropped on Apply)."""
    req = {
        "name": "no_vomit",
        "type": "binary",
        "question": "Does the responder warn not to make the person vomit?",
        "rules": {
            1: {"any": ["do not induce"], "regex": "vomit", "negation_aware": False},
            0: {"any": ["x"]},
        },
    }
    fields = editor.fields_from_requirement(req)
    assert fields["rule_1_negation_aware"] is False and fields["rule_0_negation_aware"] is True
    back = editor.requirement_from_fields(fields)
    assert back["rules"][1]["negation_aware"] is False
    assert "negation_aware" not in back["rules"][0]  # the default stays implicit
