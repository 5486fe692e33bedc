"""Fixtures of the envs tests: a vLLM server started with the RL flags of :func:`envs.serve.rl_server`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from envs.vllm_server import VllmServer
from tests.support.vllm_fixtures import TEST_MAX_MODEL_LEN, vllm_python_or_skip


@pytest.fixture(scope="session")
def rl_vllm_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """The tiny model served for RL: dev-mode control routes, the weight-reload worker extension and
    ``--logprobs-mode processed_logprobs``. Tests that change its weights put the originals back."""
    python = vllm_python_or_skip()
    from envs.serve import rl_server

    log = tmp_path_factory.mktemp("rl-vllm-server") / "server.log"
    server = rl_server(
        tiny_model_dir, port=None, max_model_len=TEST_MAX_MODEL_LEN, python=python, log_path=log
    )
    with server:
        yield server
