"""Shared pieces of the synthetic-pipeline tests: the small rubric, its phrases, and a run helper."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from envs.synth.generate import EndpointGenerator
from envs.synth.pipeline import SynthOptions, run_synth
from rubrics.multistep.rubric_io import load_rubric

DATA = Path(__file__).parent / "data"
ROADSIDE = DATA / "roadside.yaml"

PHRASES = {
    ("scene_safe", "1"): "The scene is safe, so I approach.",
    ("scene_safe", "0"): "The scene is unsafe, so I stage at a distance.",
    ("hazard", "0"): "I wait for the police to secure it.",
    ("hazard", "1"): "I call the fire department.",
    ("hazard", "2"): "I call the utility company.",
    ("conscious", "1"): "The patient is conscious and talks to me.",
    ("conscious", "0"): "The patient is unconscious.",
    ("history", "1"): "The medic takes a history from the patient.",
    ("history", "0"): "There is no history to take.",
    ("breathing", "1"): "The patient is breathing normally.",
    ("breathing", "0"): "The patient is not breathing.",
}
"""A sentence per (requirement, answer) that the roadside rubric's rules judge as that answer."""


def questions(rubric_path: Path = ROADSIDE) -> dict[str, str]:
    """Requirement question -> name (what the scripted writer needs to answer as an LLM judge)."""
    return {r.question.strip(): r.name for r in load_rubric(rubric_path).requirements}


def run(base_url: str, out: Path, n: int, rubric: Path = ROADSIDE, **options: Any) -> dict[str, Any]:
    """The pipeline against an endpoint, in this process (fast retries)."""

    async def go() -> dict[str, Any]:
        generator = EndpointGenerator(base_url, "writer", concurrency=4, backoff_initial_s=0.01, timeout_s=10)
        try:
            return await run_synth(rubric, out, generator, SynthOptions(n=n, progress=False, **options))
        finally:
            await generator.close()

    return asyncio.run(go())


def assert_honest(report: dict[str, Any]) -> None:
    """The report's counts add up and its coverage matches its kept count."""
    counts = report["counts"]
    assert counts["planned"] == counts["kept"] + counts["dropped"]
    assert counts["dropped"] == sum(report["dropped"].values()) == len(report["drops"])
    for name, answers in report["coverage"].items():
        kept_here = sum(v["kept"] for v in answers.values())
        assert kept_here <= counts["kept"], name
