"""The Rubric section's save panel, through Streamlit's app-testing API: a save edits the opened file in
place, says before it overwrites what it would lose, and moves only what an edit changed."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

pytest.importorskip("streamlit")

from rubrics.multistep.rubric_io import load_rubric, rubric_to_dict

from .app_driver import go, start, texts
from .conftest import COMMENTED

ENDS = """\
# A branch that ends, phrase lists quoted three ways and wrapped by hand.
format_version: 1
name: ends
requirements:
  - name: scene_safe
    question: >-
      Is the scene safe to enter, with no traffic, fire, fumes or
      violence nearby?
    dependencies:
      1.0: [gloves]
      0.0: []
    rules:
      1.0:
        any: [safe, "scene is safe", 'safe to enter',
              all clear]   # hand-wrapped
      0.0: {any: [unsafe, "stay back"]}

  - name: gloves
    question: Gloves on?
    rules:
      1.0: {any: [gloves]}
      0.0: {none: [gloves]}
"""
"""A rubric whose first requirement has an empty branch (``0.0: []``: a "no" ends the walk) and a phrase
list mixing plain, double- and single-quoted items over two lines."""


def test_editing_one_requirement_changes_only_its_changed_lines(
    monkeypatch: pytest.MonkeyPatch, workdir: Path
) -> None:
    (workdir / "ends.yaml").write_text(ENDS)
    at = start(monkeypatch, workdir, "ends.yaml")
    go(at, "Requirements")
    at.selectbox(key="edit_target").set_value("scene_safe").run()
    assert at.multiselect(key="ef_dep_0").value == []  # the empty branch shows as nothing unlocked
    at.text_area(key="ef_question").set_value(
        "Is the scene safe to enter, with no traffic, fire, fumes or violence nearby right now?"
    )
    at.text_area(key="ef_rule_1_any").set_value("safe\nscene is safe\nno hazards\nsafe to enter\nall clear")
    at.button(key="edit_apply").click().run()
    assert "updated requirement 'scene_safe'" in texts(at.success)
    go(at, "Rubric")
    assert any("only changed values move" in c.value for c in at.caption)
    assert not at.warning  # nothing would be lost: no confirmation asked
    at.button(key="rubric_save").click().run()
    assert "saved ends.yaml (comments and layout kept)" in texts(at.success)
    saved = (workdir / "ends.yaml").read_text()
    diff = [line for line in difflib.unified_diff(ENDS.splitlines(), saved.splitlines(), n=0, lineterm="")]
    # two lines of scene_safe move: the question's second line (its first keeps its words) and the phrase
    # list's first line, where the new phrase goes after its double-quoted neighbour, quoted like it; the
    # empty branch, the other items' quoting, the hand-wrapping and the comment stay
    assert diff[2:] == [
        "@@ -8 +8 @@",
        "-      violence nearby?",
        "+      violence nearby right now?",
        "@@ -14 +14 @@",
        "-        any: [safe, \"scene is safe\", 'safe to enter',",
        '+        any: [safe, "scene is safe", "no hazards", \'safe to enter\',',
    ]
    scene_safe = rubric_to_dict(load_rubric(workdir / "ends.yaml"))["requirements"][0]
    assert scene_safe["dependencies"] == {1.0: ["gloves"], 0.0: []}
    assert scene_safe["rules"][1.0]["any"] == [
        "safe",
        "scene is safe",
        "no hazards",
        "safe to enter",
        "all clear",
    ]


def test_save_keeps_comments_and_layout_and_says_what_it_would_lose(
    monkeypatch: pytest.MonkeyPatch, workdir: Path
) -> None:
    (workdir / "commented.yaml").write_text(COMMENTED)
    at = start(monkeypatch, workdir, "commented.yaml")
    go(at, "Requirements")
    at.selectbox(key="edit_target").set_value("scene_safe").run()
    at.text_area(key="ef_question").set_value("Is the scene safe to enter?")
    at.button(key="edit_apply").click().run()
    go(at, "Rubric")
    assert not at.warning  # nothing would be lost: Save is offered without a confirmation
    at.button(key="rubric_save").click().run()
    saved = (workdir / "commented.yaml").read_text()
    # only the edited line changed: every comment, blank line, flow list and folded question as written
    assert saved == COMMENTED.replace("Is the scene safe?   #", "Is the scene safe to enter?   #")
    assert "saved commented.yaml (comments and layout kept)" in texts(at.success)
    assert load_rubric(workdir / "commented.yaml").requirements[0].question == "Is the scene safe to enter?"
    # a change that drops a comment is announced before the save, which waits for a confirmation
    go(at, "Requirements")
    at.selectbox(key="edit_target").set_value("gloves").run()
    at.text_area(key="ef_rule_1_any").set_value("put on gloves\nnitrile")
    at.button(key="edit_apply").click().run()
    go(at, "Rubric")
    assert any("drops 1 comment line(s)" in t and "# the canonical wording" in t for t in texts(at.warning))
    assert at.button(key="rubric_save").disabled  # until "Overwrite anyway" is ticked
    # revert to saved: the edit is gone, the document is the file's again
    assert not at.button(key="rubric_revert").disabled
    at.button(key="rubric_revert").click().run()
    assert any("reverted to the saved commented.yaml" in t for t in texts(at.info))
    assert at.session_state.doc == rubric_to_dict(load_rubric(workdir / "commented.yaml"))
    assert at.button(key="rubric_revert").disabled and not at.session_state.dirty
    # the same edit, confirmed: written, the other comments kept
    go(at, "Requirements")
    at.selectbox(key="edit_target").set_value("gloves").run()
    at.text_area(key="ef_rule_1_any").set_value("put on gloves\nnitrile")
    at.button(key="edit_apply").click().run()
    go(at, "Rubric")
    at.checkbox(key="rubric_confirm").check().run()
    at.button(key="rubric_save").click().run()
    text = (workdir / "commented.yaml").read_text()
    assert "# the canonical wording" not in text
    assert all(
        c in text
        for c in ("# Triage of a scene", "# ---- level 0", "# the first thing asked", "# ---- level 1")
    )
    assert load_rubric(workdir / "commented.yaml").requirements[1].rules[1.0]["any"][-1] == "nitrile"
    # "Save as" onto another existing file asks first too
    at.text_input(key="rubric_save_path").set_value("rubrics/incident_triage.yaml").run()
    assert any("already exists and is not the file you opened" in t for t in texts(at.warning))
    assert at.button(key="rubric_save_as").disabled
