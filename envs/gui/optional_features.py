"""Optional features found at run time: the rubric probe (``rubrics.multistep.probe``) and synthetic scenario
generation (``envs.synth``). Each is offered when its module imports, otherwise the app shows a disabled
button with the reason (``available``)."""

from __future__ import annotations

import asyncio
import copy
import importlib
import tempfile
from pathlib import Path
from typing import Any

from envs.gui import document
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.rubric_io import load_scenarios, scenario_from_dict

PROBE = "rubrics.multistep.probe"
"""The trivial-policy probe."""
SYNTH = "envs.synth.pipeline"
"""The synthetic scenario pipeline."""


def available(module: str) -> str | None:
    """None when ``module`` imports, else why it does not."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        return f"{module} is not available in this installation ({exc})"
    return None


def run_probe(rubric: MultiStepRubric, scenarios: list[dict[str, Any]], max_turns: int) -> str:
    """The probe's table (markdown): the reward trivial policies earn on ``scenarios``."""
    probe = importlib.import_module(PROBE)
    played = [scenario_from_dict(copy.deepcopy(s), f"scenarios[{i}]") for i, s in enumerate(scenarios)]
    for scenario in played:
        scenario.validate(rubric)
    rows = asyncio.run(probe.probe(rubric, played, max_turns))
    return "\n".join(probe.format_table(rows))


def generate(
    doc: document.Doc, base_url: str, model: str, api_key_env: str | None, n: int, seed: int = 0
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Generate ``n`` scenarios for the rubric of ``doc`` with the synthetic pipeline on an
    OpenAI-compatible endpoint. The run's files go to a temporary folder (removed after), never the
    working directory; returns the kept scenarios as plain data and the pipeline's report."""
    pipeline = importlib.import_module(SYNTH)
    from envs.synth.generate import EndpointGenerator

    generator = EndpointGenerator(base_url, model, api_key_env or None)
    with tempfile.TemporaryDirectory(prefix="rubric-gui-synth-") as tmp:
        rubric_path = Path(tmp) / "rubric.yaml"
        document.save_document(doc, str(rubric_path))
        options = pipeline.SynthOptions(n=n, seed=seed, progress=False)

        async def go() -> Any:
            try:
                return await pipeline.run_synth(rubric_path, Path(tmp) / "out", generator, options)
            finally:
                await generator.close()

        report = asyncio.run(go()) or {}
        out = Path(tmp) / "out" / "scenarios.yaml"
        scenarios = [s.to_dict() for s in load_scenarios(out)] if out.is_file() else []
    return scenarios, report
