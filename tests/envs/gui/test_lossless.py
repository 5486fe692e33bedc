"""Saving edits the opened file in place: unchanged rubrics come back byte for byte, edits touch only their
own lines, and what cannot be placed falls back to a re-dump that reports the comments it drops."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from envs.gui import document
from envs.gui.lossless import comment_lines, plan_save
from rubrics.multistep.rubric_io import rubric_from_dict, rubric_to_dict

from .conftest import COMMENTED, ROOT


def loaded(text: str) -> document.Doc:
    return rubric_to_dict(rubric_from_dict(yaml.safe_load(text), "rubric"))


@pytest.mark.parametrize("name", ["first_responder", "incident_triage"])
def test_an_unchanged_example_rubric_is_saved_byte_for_byte(name: str) -> None:
    text = (ROOT / "configs" / "rubrics" / f"{name}.yaml").read_text()
    plan = plan_save(loaded(text), text, loaded(text))
    assert plan.in_place and plan.text == text and not plan.lost_comments


def test_rename_delete_and_add_keep_every_other_comment() -> None:
    text = (ROOT / "configs" / "rubrics" / "first_responder.yaml").read_text()
    old = loaded(text)
    doc, _ = document.rename_requirement(old, "hazard_type", "hazard_kind")
    doc, _ = document.delete_requirement(doc, "bsi_ppe")
    doc = document.add_requirement(
        doc, {"name": "extra", "question": "Extra?", "rules": {1.0: {"any": ["x"]}}}
    )
    doc["requirements"][-2]["dependencies"] = {1.0: ["extra"]}
    plan = plan_save(doc, text, old)
    assert plan.in_place and not plan.lost_comments
    assert comment_lines(plan.text) == comment_lines(text)
    assert loaded(plan.text) == rubric_to_dict(rubric_from_dict(copy.deepcopy(doc), "rubric"))
    assert "  - name: hazard_kind\n" in plan.text and "bsi_ppe" not in plan.text
    assert plan.text.endswith(
        "\n  - name: extra\n    question: Extra?\n    rules:\n      1.0:\n        any: [x]\n"
    )


def test_a_changed_phrase_list_keeps_its_style_and_a_folded_question_stays_folded() -> None:
    old = loaded(COMMENTED)
    doc = copy.deepcopy(old)
    doc["requirements"][0]["rules"][1.0]["any"].append("all clear")
    doc["requirements"][1]["question"] = "Are gloves on before touching the patient or the stretcher?"
    plan = plan_save(doc, COMMENTED, old)
    assert '      1.0: {any: ["scene is safe", "safe to enter", "all clear"]}\n' in plan.text
    # the first line keeps its words and stays; the second is re-wrapped at the block's width (35)
    assert (
        "    question: >-\n      Are gloves on before touching\n      the patient or the stretcher?\n    rules:"
        in plan.text
    )
    assert plan.in_place and not plan.lost_comments


def test_comments_inside_a_rewritten_value_are_reported() -> None:
    old = loaded(COMMENTED)
    doc = copy.deepcopy(old)
    doc["requirements"][1]["rules"][1.0]["any"] = ["gloves on"]
    plan = plan_save(doc, COMMENTED, old)
    assert plan.in_place and plan.lost_comments == ["# the canonical wording"]


def test_no_source_is_a_plain_dump() -> None:
    doc = loaded(COMMENTED)
    plan = plan_save(doc, None, None)
    assert not plan.in_place and plan.text == document.to_yaml(doc) and not plan.lost_comments


def test_a_json_file_is_saved_as_json() -> None:
    old = loaded(COMMENTED)
    source = json.dumps(old, indent=2)  # answer keys become "1.0"
    doc = copy.deepcopy(old)
    doc["requirements"][0]["rules"][1.0]["any"].append("all clear")
    plan = plan_save(doc, source, old)
    assert not plan.in_place and plan.note == "the file is JSON: written as JSON from scratch"
    assert plan.text == json.dumps(doc, indent=2) + "\n"
    assert loaded(plan.text) == rubric_to_dict(rubric_from_dict(copy.deepcopy(doc), "rubric"))
