"""The optional features the app wires when they exist: synthetic generation through ``envs.synth`` against
a local scripted OpenAI-compatible server, and the reason shown when a module is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from envs.gui import document, optional_features
from rubrics.multistep.rubric_io import load_rubric, scenario_from_dict


def test_missing_module_gives_a_reason() -> None:
    reason = optional_features.available("envs.no_such_module")
    assert reason is not None and "envs.no_such_module is not available" in reason


def test_generate_returns_valid_scenarios_and_writes_nothing_in_the_workdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if optional_features.available(optional_features.SYNTH) is not None:
        pytest.skip("envs.synth is not in this checkout")
    synth_server = pytest.importorskip("tests.support.synth_server")
    helpers = pytest.importorskip("tests.envs.synth.helpers")
    from tests.support.judge_server import JudgeServer

    monkeypatch.chdir(tmp_path)
    doc = document.load_document(str(helpers.ROADSIDE))
    with JudgeServer(synth_server.ScenarioWriter(helpers.PHRASES, {})) as server:
        scenarios, report = optional_features.generate(doc, server.base_url, "writer", None, n=2)
    assert len(scenarios) == report["counts"]["kept"] >= 1
    rubric = load_rubric(helpers.ROADSIDE)
    for i, data in enumerate(scenarios):
        scenario_from_dict(data, f"generated[{i}]").validate(rubric)
    assert list(tmp_path.iterdir()) == []  # the run's files went to a temporary folder
