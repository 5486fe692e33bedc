"""Fixtures of the rubric builder's tests: a working directory holding copies of the example rubrics and
scenarios, and a small three-requirement branching rubric with rules."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
"""The repository."""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A working directory with ``rubrics/`` and ``scenarios/`` copied from ``configs/``."""
    root = tmp_path / "work"
    shutil.copytree(ROOT / "configs" / "rubrics", root / "rubrics")
    shutil.copytree(ROOT / "configs" / "scenarios", root / "scenarios")
    return root


def branching_requirements() -> list[dict[str, Any]]:
    """scene_safe (root) -> 1.0: gloves, 0.0: police; each judged by whole-word rules."""
    return [
        {
            "name": "scene_safe",
            "type": "binary",
            "question": "Is the scene safe?",
            "dependencies": {1.0: ["gloves"], 0.0: ["police"]},
            "rules": {1.0: {"any": ["scene is safe"]}, 0.0: {"any": ["unsafe"]}},
        },
        {
            "name": "gloves",
            "type": "binary",
            "question": "Gloves on?",
            "rules": {1.0: {"any": ["gloves"]}, 0.0: {"none": ["gloves"]}},
        },
        {
            "name": "police",
            "type": "binary",
            "question": "Police called?",
            "rules": {1.0: {"any": ["police"]}, 0.0: {"none": ["police"]}},
        },
    ]


COMMENTED = """\
# Triage of a scene, written by hand.
format_version: 1
name: commented
requirements:
  # ---- level 0
  - name: scene_safe
    question: Is the scene safe?   # the first thing asked
    dependencies: {1.0: [gloves]}
    rules:
      1.0: {any: ["scene is safe", "safe to enter"]}
      0.0: {any: [unsafe]}

  # ---- level 1
  - name: gloves
    question: >-
      Are gloves on before touching
      the patient?
    rules:
      1.0:
        any: ["gloves on",   # the canonical wording
              "put on gloves"]
      0.0: {none: [gloves]}
"""
"""A hand-written rubric with comments (own lines, end of line, inside a flow list), blank lines, a folded
question and flow lists: what a save must keep."""
