"""Fixtures of the envs tests: a vLLM server started with the RL flags of :func:`envs.serve.rl_server`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from envs.vllm_server import VllmServer, default_vllm_python, vllm_available
from tests.support.vllm_fixtures import REQUIRE_VLLM_ENV_VAR, TEST_MAX_MODEL_LEN, require_vllm


@pytest.fixture(scope="session")
def rl_vllm_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """The tiny model served for RL: dev-mode control routes, the weight-reload worker extension and
    ``--logprobs-mode processed_logprobs``. Tests that change its weights put the originals back."""
    python = default_vllm_python()
    if not vllm_available(python):
        reason = f"vLLM environment missing ({python}): run ./install.sh --with-vllm"
        if require_vllm():
            pytest.fail(f"{reason} ({REQUIRE_VLLM_ENV_VAR}=1 is set)")
        pytest.skip(reason)
    from envs.serve import rl_server

    log = tmp_path_factory.mktemp("rl-vllm-server") / "server.log"
    server = rl_server(
        tiny_model_dir, port=None, max_model_len=TEST_MAX_MODEL_LEN, python=python, log_path=log
    )
    with server:
        yield server
