"""Scenarios being edited: the example scenario files round-trip through the editor's fields."""

from __future__ import annotations

import pytest

from envs.gui import document, scenario_doc

from .conftest import ROOT

EXAMPLES = ["first_responder", "incident_triage"]


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
