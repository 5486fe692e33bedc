"""The requirement editor's form fields: an edit keeps the empty branches the author wrote."""

from __future__ import annotations

from typing import Any

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
