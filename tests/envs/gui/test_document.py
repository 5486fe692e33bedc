"""The document the builder edits: library files round-trip unchanged, rename and delete everywhere, judges
and strategy, parents and roots, and validation messages placed on the requirement and field they name."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from envs.gui import document, editor
from rubrics.multistep.rubric_io import load_rubric, rubric_to_dict

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
