"""``rubric-grpo rubric validate`` and ``rubric-grpo rubric show``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from rubrics.multistep import MultiStepRubric, Scenario, save_rubric, save_scenarios
from train.cli import main

from .helpers import quickstart_requirements, rule_judges


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    rubric = MultiStepRubric(quickstart_requirements(), rule_judges(), name="seed")
    rubric_path = tmp_path / "seed.yaml"
    save_rubric(rubric, rubric_path)
    scenario = Scenario(prompt="Crash.", answers={"scene_safety": {"answer": 1.0}}, name="s1")
    scenario_path = tmp_path / "seed_scenarios.yaml"
    save_scenarios([scenario], scenario_path)
    return rubric_path, scenario_path


def test_validate_ok(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    rubric_path, scenario_path = files
    assert main(["rubric", "validate", str(rubric_path), "--scenarios", str(scenario_path)]) == 0
    out = capsys.readouterr().out
    assert "ok: 4 requirements, 3 levels, 2 paths; 1 scenarios ok" in out


def test_validate_reports_file_entry_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "format_version: 1\nrequirements:\n  - {name: a, question: 'A?', dependencies: {1.0: [b]}}\n"
    )
    assert main(["rubric", "validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3: requirements[0]: field 'dependencies' (1.0) names unknown requirement 'b'" in err


def test_show_prints_levels_branches_paths_and_draws(
    files: tuple[Path, Path], tmp_path: Path, capsys
) -> None:
    rubric_path, _ = files
    svg = tmp_path / "dag.svg"
    assert main(["rubric", "show", str(rubric_path), "--svg", str(svg)]) == 0
    out = capsys.readouterr().out
    assert (
        "levels:\n  0: scene_safety\n  1: patient_consciousness\n  2: communication, airway_management" in out
    )
    assert "patient_consciousness [binary]: 1 -> communication; 0 -> airway_management" in out
    assert "scene_safety -> patient_consciousness -> communication" in out
    root = ElementTree.fromstring(svg.read_text())
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert {"scene_safety", "patient_consciousness", "communication", "airway_management"} <= set(texts)
    assert len(list(root.iter("{http://www.w3.org/2000/svg}line"))) == 3  # three edges


def test_validate_imports_nothing_heavy(files: tuple[Path, Path]) -> None:
    """``rubric validate`` must answer in well under a second: it never imports torch or transformers."""
    rubric_path, _ = files
    code = (
        "import sys; from train.cli import main; rc = main(['rubric', 'validate', sys.argv[1]]); "
        "print('HEAVY', [m for m in ('torch', 'transformers', 'numpy') if m in sys.modules]); sys.exit(rc)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(rubric_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout
