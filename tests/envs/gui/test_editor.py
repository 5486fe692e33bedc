"""The requirement editor's form fields and back for every requirement type, a rule's negation switch, and
the empty branches an edit keeps."""

from __future__ import annotations

from typing import Any

import pytest

from envs.gui import editor


def test_an_edit_elsewhere_keeps_an_empty_branch_and_a_cleared_one_is_not_invented() -> None:
    before: dict[str, Any] = {
        "name": "scene_safe",
        "type": "binary",
        "question": "Safe?",
        "dependencies": {1.0: ["gloves"], 0.0: []},
        "rules": {1.0: {"any": ["safe"]}},
    }
    fields = editor.fields_from_requirement(before)
    fields["question"] = "Is the scene safe?"
    req = editor.requirement_from_fields(fields)
    assert req["dependencies"] == {1.0: ["gloves"]}  # the form shows no branch and an empty one alike
    kept = editor.keep_empty_branches(req, before, fields)
    assert kept == {**before, "question": "Is the scene safe?"}
    assert list(kept) == ["name", "type", "question", "dependencies", "rules"]
    # an answer the form no longer has (the type changed) loses its empty branch
    fields["type"] = "discrete"
    fields["options"] = "1: yes\n2: maybe"
    discrete = editor.requirement_from_fields(fields)
    assert editor.keep_empty_branches(discrete, before, fields)["dependencies"] == {1.0: ["gloves"]}
    # a branch emptied by this edit has no empty branch to keep: it goes, as the form shows it
    fields = editor.fields_from_requirement({**before, "dependencies": {1.0: ["gloves"]}})
    fields["dep_1"] = []
    req = editor.requirement_from_fields(fields)
    assert "dependencies" not in editor.keep_empty_branches(
        req, {**before, "dependencies": {1.0: ["gloves"]}}, fields
    )


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
