"""The rubric builder in a real browser: start it with the CLI, build a three-requirement branching rubric in
headless Chromium, grade a reply, save, and load the saved file in the library.

Skips only when Chromium or chromedriver is missing and ``RUBRIC_GRPO_REQUIRE_BROWSER`` is unset (CI sets
it, so there a missing browser fails)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

pytest.importorskip("streamlit")

from rubrics.multistep.rubric_io import load_rubric

from .browser import REQUIRE_ENV, App, browser_paths, make_driver, running_app
from .conftest import COMMENTED

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture(scope="module", autouse=True)
def need_browser() -> None:
    if browser_paths() is None:
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"chromium/chromedriver missing and {REQUIRE_ENV} is set (run ./install.sh)")
        pytest.skip("chromium and chromedriver are not installed (./install.sh installs them with apt-get)")
    pytest.importorskip("selenium")


def add(
    app: App, name: str, yes: str, no: str, unlock_yes: str = "", unlock_no: str = "", unlocked_by: str = ""
) -> None:
    app.type("ef_name", name)
    app.type("ef_question", f"Does the reply handle {name}?")
    app.type("ef_rule_1_any", yes)
    app.type("ef_rule_0_any", no)
    if unlock_yes:
        app.pick("ef_dep_1", unlock_yes)
    if unlock_no:
        app.pick("ef_dep_0", unlock_no)
    if unlocked_by:
        app.pick("ef_parents", unlocked_by)
    app.click("edit_apply")
    app.wait_text(f"added requirement '{name}'")


def test_build_grade_and_save_in_chromium(tmp_path: Path) -> None:
    started = time.monotonic()
    work = tmp_path / "work"
    work.mkdir()
    with running_app(work, "branching.yaml") as url:
        assert url.startswith("http://127.0.0.1:")
        driver = make_driver()
        try:
            app = App(driver, url)
            app.wait_text("branching.yaml does not exist yet")
            app.section("Requirements")
            add(app, "gloves", "gloves", "no gloves")
            add(app, "police", "police", "no police")
            add(app, "scene_safe", "scene is safe", "unsafe", unlock_yes="gloves", unlock_no="police")
            app.wait_text("valid · 3 requirements", "section[data-testid='stSidebar']")

            # clearing a name and applying is refused under the Name field; nothing is renamed
            app.pick("edit_target", "gloves")
            app.type("ef_name", "")
            app.click("edit_apply")
            app.wait_text("a requirement needs a name; nothing was changed")
            assert "a requirement needs a name" in app.column_text("ef_name")
            assert "renamed" not in app.text()
            app.wait_text("valid · 3 requirements", "section[data-testid='stSidebar']")

            app.section("Grade a reply")
            app.type("grade_truth_scene_safe", "1")
            app.type("grade_truth_gloves", "1")
            app.type("grade_reply", "The scene is safe, so I go in. I put on gloves first.")
            app.click("grade_run")
            app.wait_text("Path taken")
            text = app.wait_text("1.000")  # the metric may draw after the path under load
            assert "Path taken: scene_safe → gloves" in text
            assert "1.000" in text  # the whole ground-truth path satisfied: normalised reward 1
            driver.save_screenshot(str(tmp_path / "grade.png"))

            # a fourth requirement, unlocked by gloves' yes when it is added: no extra root
            app.section("Requirements")
            app.pick("edit_target", "(new requirement)")
            add(app, "bandage", "bandage", "no bandage", unlocked_by="gloves: 1 (yes)")
            assert "is now a root" not in app.text()
            app.wait_text("valid · 4 requirements", "section[data-testid='stSidebar']")

            app.section("Rubric")
            assert not (work / "branching.yaml").exists()  # nothing is written before an explicit save
            app.click("rubric_save")
            app.wait_text("saved branching.yaml")
            driver.save_screenshot(str(tmp_path / "saved.png"))
        finally:
            driver.quit()
    rubric = load_rubric(work / "branching.yaml")
    assert [r.name for r in rubric.requirements] == ["gloves", "police", "scene_safe", "bandage"]
    assert rubric.graph.requirements["scene_safe"].dependencies == {1.0: ["gloves"], 0.0: ["police"]}
    assert rubric.graph.requirements["gloves"].dependencies == {1.0: ["bandage"]}
    assert rubric.roots == ["scene_safe"]
    assert (tmp_path / "grade.png").stat().st_size > 10_000
    print(f"browser test took {time.monotonic() - started:.1f} s; screenshots in {tmp_path}")


def test_save_keeps_comments_in_chromium(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "commented.yaml").write_text(COMMENTED)
    with running_app(work, "commented.yaml") as url:
        driver = make_driver()
        try:
            app = App(driver, url)
            app.section("Requirements")
            app.pick("edit_target", "scene_safe")
            app.type("ef_question", "Is the scene safe to enter?")
            app.click("edit_apply")
            app.wait_text("updated requirement 'scene_safe'")
            app.section("Rubric")
            app.wait_text("saving edits the file in place")
            save_as = app.wait_for(".st-key-rubric_save_path input")
            assert save_as.get_attribute("value") == ""  # "Save as" does not start on the opened file
            app.click("rubric_save")
            app.wait_text("saved commented.yaml (comments and layout kept)")
        finally:
            driver.quit()
    expected = COMMENTED.replace("Is the scene safe?   #", "Is the scene safe to enter?   #")
    assert (work / "commented.yaml").read_text() == expected
