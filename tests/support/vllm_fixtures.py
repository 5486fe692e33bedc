"""Session fixtures: the tiny random model (``tiny_model_dir``) and real vLLM servers on it: ``vllm_server``
(plain), ``rl_vllm_server`` (started for RL: weight reload, processed logprobs) and ``lora_vllm_server`` (the
same, loading LoRA adapters of rank up to 16 at run time); ``restore_weights`` puts the tiny model's own
weights back on the RL server after a test that pushed others.

Enable them from ``tests/conftest.py`` with ``pytest_plugins = ["tests.support.vllm_fixtures"]``.

``vllm_server`` needs vLLM in ``.venv`` (``./install.sh --with-vllm``), as does the colocated engine
(``vllm_in_process_or_skip``). Without it the tests that use it are skipped, unless ``RUBRIC_GRPO_REQUIRE_VLLM=1`` is set (CI on a machine that must have it), which turns the
skip into a failure. The server starts once per session (about 30-60 s on two cores) and is stopped at
the end of it. ``RUBRIC_GRPO_VLLM_PYTHON`` points the servers at another interpreter of a vLLM environment.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from envs.serving.server import VllmServer, default_vllm_python, vllm_available

REQUIRE_VLLM_ENV_VAR = "RUBRIC_GRPO_REQUIRE_VLLM"

# Structured output for a random model. Compact JSON: otherwise the model fills max_tokens with the
# whitespace JSON allows between tokens (vLLM accepts the option only with an explicit xgrammar or
# guidance backend). guidance, not xgrammar: xgrammar 0.2.8 lets raw control characters into strings,
# which json.loads rejects; guidance escapes them. A schema's free strings still need a maxLength.
TEST_SERVER_ARGS = (
    "--structured-outputs-config",
    json.dumps({"backend": "guidance", "disable_any_whitespace": True}),
)
TEST_MAX_MODEL_LEN = 512


def require_vllm() -> bool:
    """Whether a missing vLLM environment must fail the tests instead of skipping them."""
    return os.environ.get(REQUIRE_VLLM_ENV_VAR, "") not in ("", "0", "false", "False")


def vllm_python_or_skip() -> Path:
    """The vLLM environment's interpreter; skips the test without one (fails when it is required)."""
    python = default_vllm_python()
    if not vllm_available(python):
        reason = f"vLLM environment missing ({python}): run ./install.sh --with-vllm"
        if require_vllm():
            pytest.fail(f"{reason} ({REQUIRE_VLLM_ENV_VAR}=1 is set)")
        pytest.skip(reason)
    return Path(python)


def vllm_in_process_or_skip() -> None:
    """Skip the test unless vLLM imports in this interpreter (fail instead where it is required)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        reason = "vLLM is not installed in this environment: run ./install.sh --with-vllm"
        if require_vllm():
            pytest.fail(f"{reason} ({REQUIRE_VLLM_ENV_VAR}=1 is set)")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder of the tiny random Qwen2 model with its ChatML tokenizer (seed 0), built once per session."""
    pytest.importorskip("transformers", reason="the tiny model needs the train extra (transformers)")
    from envs.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), seed=0)


@pytest.fixture(scope="session")
def vllm_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """A running vLLM OpenAI server on the tiny model; ``vllm_server.base_url`` is its root URL.

    The served model name is the model folder's path (``str(tiny_model_dir)``). Started with
    ``--dtype float32 --enforce-eager --seed 0 --max-model-len 512`` and ``TEST_SERVER_ARGS``.
    """
    python = vllm_python_or_skip()
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    with VllmServer(
        tiny_model_dir,
        python=python,
        max_model_len=TEST_MAX_MODEL_LEN,
        extra_args=TEST_SERVER_ARGS,
        log_path=log,
    ) as server:
        yield server


@pytest.fixture(scope="session")
def rl_vllm_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """The tiny model served for RL: dev-mode control routes, the weight-reload worker extension and
    ``--logprobs-mode processed_logprobs``. Tests that change its weights use ``restore_weights``."""
    python = vllm_python_or_skip()
    from envs.serving.launch import rl_server

    log = tmp_path_factory.mktemp("rl-vllm-server") / "server.log"
    server = rl_server(
        tiny_model_dir, port=None, max_model_len=TEST_MAX_MODEL_LEN, python=python, log_path=log
    )
    with server:
        yield server


@pytest.fixture(scope="session")
def lora_vllm_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """The tiny model served for a LoRA run of rank up to 16 (``rubric-grpo serve --lora-rank 16``): the RL
    flags and ``--enable-lora --max-lora-rank 16 --max-loras 2``, adapters loaded at run time."""
    python = vllm_python_or_skip()
    from envs.serving.launch import rl_server

    log = tmp_path_factory.mktemp("lora-vllm-server") / "server.log"
    server = rl_server(
        tiny_model_dir, port=None, max_model_len=TEST_MAX_MODEL_LEN, python=python, log_path=log, lora_rank=16
    )
    with server:
        yield server


@pytest.fixture
def restore_weights(rl_vllm_server: VllmServer, tiny_model_dir: Path) -> Iterator[VllmServer]:
    """``rl_vllm_server``, given the tiny model's own weights back after the test (it is shared)."""
    import asyncio

    from envs.serving.weights import push_weights

    yield rl_vllm_server
    asyncio.run(push_weights(rl_vllm_server.base_url, tiny_model_dir / "model.safetensors", timeout_s=60))


def smollm2_vllm_server(log_dir: Path, max_model_len: int, extra_args: tuple[str, ...] = ()) -> VllmServer:
    """A server (not yet started) of SmolLM2-135M-Instruct, its log in ``log_dir``; skips the test without
    vLLM or without the model (fails instead where vLLM is required)."""
    from envs.models import ModelNotAvailableError, resolve_model

    python = vllm_python_or_skip()
    try:
        model = resolve_model("smollm2")
    except ModelNotAvailableError as exc:
        pytest.skip(str(exc))
    return VllmServer(
        model,
        python=python,
        max_model_len=max_model_len,
        extra_args=extra_args,
        log_path=log_dir / "server.log",
    )
