"""The DAG drawing's edges labelled by answer names."""

from __future__ import annotations

from envs.gui import document
from rubrics.multistep.rubric_io import load_rubric

from .conftest import ROOT


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
