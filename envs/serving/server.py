"""Start, health-check and stop a local vLLM OpenAI-compatible server.

vLLM lives in the trainer's own ``.venv`` (``./install.sh --with-vllm``), and the server runs as a
subprocess of this interpreter, or of ``$RUBRIC_GRPO_VLLM_PYTHON`` where a vLLM environment of its own is
wanted (another vLLM version beside the trainer's, say)::

    with VllmServer(model_dir, max_model_len=512) as server:
        httpx.post(f"{server.base_url}/v1/completions", json={...})

The server binds to 127.0.0.1 on a free port, logs to a file, and is stopped with its whole process group
(vLLM forks an engine core process). Start-up failures raise :class:`VllmServerError` with the tail of
the log. Only the standard library is used here.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

REPO_ROOT = Path(__file__).resolve().parents[2]

# The interpreter of the server's environment; RUBRIC_GRPO_VLLM_PYTHON overrides the default.
VLLM_PYTHON_ENV_VAR = "RUBRIC_GRPO_VLLM_PYTHON"


def normalize_base_url(url: str) -> str:
    """``http://host:port`` from ``http://host:port/``, ``http://host:port/v1`` and the like."""
    url = url.strip().rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"not an http(s) URL: {url!r}")
    return url


def default_vllm_python() -> Path:
    """The python that runs ``vllm serve``: ``$RUBRIC_GRPO_VLLM_PYTHON`` where it is set (a vLLM environment
    of its own), else this interpreter (``./install.sh --with-vllm`` installs vLLM into ``.venv``)."""
    override = os.environ.get(VLLM_PYTHON_ENV_VAR)
    return Path(override) if override else Path(sys.executable)


def vllm_available(python: str | Path | None = None) -> bool:
    """Whether ``python`` (default :func:`default_vllm_python`) can run vLLM: for this interpreter, whether
    vLLM is installed (found, not imported: that takes seconds); for another, whether it exists."""
    path = Path(python) if python is not None else default_vllm_python()
    if path == Path(sys.executable):
        return importlib.util.find_spec("vllm") is not None
    return path.is_file() and os.access(path, os.X_OK)


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _cpu_bind() -> str:
    """The CPUs this process may use, as vLLM's ``VLLM_CPU_OMP_THREADS_BIND`` expects (e.g. ``0-1``)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = list(range(os.cpu_count() or 1))
    if cpus == list(range(cpus[0], cpus[-1] + 1)):
        return f"{cpus[0]}-{cpus[-1]}"
    return ",".join(str(c) for c in cpus)


def server_env(
    overrides: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Environment of the server process: offline, no telemetry, all allowed cores, 1 GiB of KV cache.

    ``base`` defaults to ``os.environ``; ``overrides`` win over both (e.g. ``{"VLLM_SERVER_DEV_MODE": "1"}``).
    """
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "VLLM_CPU_OMP_THREADS_BIND": _cpu_bind(),  # "0-1" on two cores: use every core (6b)
            "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
            "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(overrides or {})
    return env


class VllmServerError(RuntimeError):
    """The server died or did not become healthy in time; the message ends with the log's tail."""


class VllmServer:
    """A ``vllm.entrypoints.openai.api_server`` subprocess serving one model on 127.0.0.1.

    Use it as a context manager (``with VllmServer(dir) as s: ... s.base_url``) or call :meth:`start`
    and :meth:`stop`. ``start`` blocks until ``GET /health`` answers 200.

    Args:
        model: Folder (or name, when offline-cached) of the model to serve.
        python: Interpreter of the vLLM environment; default :func:`default_vllm_python`.
        port: TCP port; a free one is picked when ``None``.
        host: Bind address; loopback by default so that nothing outside this machine can reach it.
        max_model_len: ``--max-model-len``.
        dtype: ``--dtype``; float32 so that its tokens and logprobs match the fp32 trainer.
        seed: ``--seed``.
        enforce_eager: Pass ``--enforce-eager`` (no graph capture/compilation; fastest start on CPU).
        extra_args: More command-line arguments, e.g. ``["--enable-lora"]``.
        env: Extra environment variables for the server, over :func:`server_env`'s defaults.
        startup_timeout: Seconds to wait for ``/health``.
        log_path: Where the server's stdout and stderr go; a temporary file when ``None``.
    """

    def __init__(
        self,
        model: str | Path,
        *,
        python: str | Path | None = None,
        port: int | None = None,
        host: str = "127.0.0.1",
        max_model_len: int = 1024,
        dtype: str = "float32",
        seed: int = 0,
        enforce_eager: bool = True,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 300.0,
        log_path: str | Path | None = None,
    ) -> None:
        self.model = str(model)
        self.python = Path(python) if python is not None else default_vllm_python()
        self.host = host
        self.port = port if port is not None else find_free_port(host)
        self.max_model_len = max_model_len
        self.dtype = dtype
        self.seed = seed
        self.enforce_eager = enforce_eager
        self.extra_args = list(extra_args)
        self.env = dict(env or {})
        self.startup_timeout = startup_timeout
        self._log_path = Path(log_path) if log_path is not None else None
        self._owns_log = log_path is None
        self._proc: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None

    @property
    def base_url(self) -> str:
        """Root URL of the server, e.g. ``http://127.0.0.1:8123`` (OpenAI routes are under ``/v1``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path | None:
        """The server's log file (``None`` before :meth:`start`)."""
        return self._log_path

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        """The command line that starts the server."""
        cmd = [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--dtype",
            self.dtype,
            "--max-model-len",
            str(self.max_model_len),
            "--seed",
            str(self.seed),
            # requests carry every sampling setting: a model's generation_config.json defaults (top_k, min_p,
            # repetition_penalty) would otherwise apply silently and change the logprobs the loss assumes
            "--generation-config",
            "vllm",
        ]
        if self.enforce_eager:
            cmd.append("--enforce-eager")
        return cmd + self.extra_args

    def start(self) -> VllmServer:
        """Start the process and wait until it is healthy; raise :class:`VllmServerError` otherwise."""
        if self._proc is not None:
            raise VllmServerError("server already started")
        if not vllm_available(self.python):
            raise VllmServerError(
                f"no vLLM for {self.python}: run ./install.sh --with-vllm or set {VLLM_PYTHON_ENV_VAR}"
            )
        if self._log_path is None:
            fd, name = tempfile.mkstemp(prefix="vllm-server-", suffix=".log")
            os.close(fd)
            self._log_path = Path(name)
        t0 = time.monotonic()
        with open(self._log_path, "wb") as log:
            self._proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=server_env(self.env),
                cwd=str(REPO_ROOT),
                start_new_session=True,  # its own process group, so stop() reaches the engine core too
            )
        atexit.register(self.stop)  # never leave a server behind when the interpreter exits
        try:
            self._wait_healthy(t0 + self.startup_timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def health(self, timeout: float = 2.0) -> bool:
        """Whether ``GET /health`` answers 200 within ``timeout`` seconds."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/health", timeout=timeout) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _wait_healthy(self, deadline: float) -> None:
        assert self._proc is not None
        while True:
            code = self._proc.poll()
            if code is not None:
                raise VllmServerError(
                    f"vLLM server exited with code {code} during start-up\n{self.log_tail()}"
                )
            if self.health():
                return
            if time.monotonic() > deadline:
                raise VllmServerError(
                    f"vLLM server not healthy after {self.startup_timeout:.0f} s\n{self.log_tail()}"
                )
            time.sleep(0.5)

    def log_tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines of the server log, framed for error messages."""
        if self._log_path is None or not self._log_path.exists():
            return "(no server log)"
        text = self._log_path.read_text(errors="replace").splitlines()[-lines:]
        return f"--- last {len(text)} lines of {self._log_path} ---\n" + "\n".join(text)

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the server's process group: SIGTERM, then SIGKILL after ``timeout`` seconds. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        atexit.unregister(self.stop)
        pgid = proc.pid  # start_new_session=True: the server leads its own process group
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=timeout)
        # Children (the engine core) may outlive the API process: clear the whole group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)

    def cleanup_log(self) -> None:
        """Delete the log file if this object created it."""
        if self._owns_log and self._log_path is not None:
            self._log_path.unlink(missing_ok=True)

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"VllmServer({self.model!r}, base_url={self.base_url!r}, {state})"
