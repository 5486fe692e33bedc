"""Start the rubric builder: ``streamlit run envs/gui/app.py`` on 127.0.0.1 and a free port.

``rubric-grpo gui`` calls ``launch``; it prints the URL and waits for the server (Ctrl-C stops it).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DIR_ENV = "RUBRIC_GRPO_GUI_DIR"
"""Environment variable naming the working directory (default: the current directory)."""
FILE_ENV = "RUBRIC_GRPO_GUI_FILE"
"""Environment variable naming a rubric file to open at start (relative to the working directory)."""
APP = Path(__file__).with_name("app.py")
"""The Streamlit script."""


@dataclass(frozen=True)
class Launch:
    """What to start."""

    workdir: Path
    """The only directory the app reads and writes."""
    file: str | None
    """A rubric to open, relative to ``workdir`` (created on first save when it does not exist)."""
    host: str
    """Bind address."""
    port: int
    """TCP port."""

    @property
    def url(self) -> str:
        """Where the app answers."""
        return f"http://{self.host}:{self.port}"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def plan(file: str | None, workdir: str | None, host: str, port: int | None) -> Launch:
    """Resolve the working directory and the file; ``ValueError`` when the file lies outside it. Without
    ``workdir`` the current directory is used, or the file's folder when the file is elsewhere."""
    path = Path(file).expanduser().resolve() if file else None
    if workdir:
        root = Path(workdir).expanduser().resolve()
    elif path is not None and Path.cwd().resolve() not in path.parents:
        root = path.parent
    else:
        root = Path.cwd().resolve()
    if not root.is_dir():
        raise ValueError(f"working directory {root} does not exist")
    relative = None
    if path is not None:
        if root not in path.parents:
            raise ValueError(f"{file} is outside the working directory {root} (use --dir)")
        relative = str(path.relative_to(root))
    return Launch(root, relative, host, port or free_port(host))


def command(launch: Launch) -> list[str]:
    """The ``streamlit run`` command line."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.address",
        launch.host,
        "--server.port",
        str(launch.port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
        "--global.developmentMode",
        "false",
        "--client.toolbarMode",
        "viewer",
        "--runner.magicEnabled",
        "false",
    ]


def environment(launch: Launch) -> dict[str, str]:
    """The server's environment: the working directory and the file to open."""
    env = dict(os.environ)
    env[DIR_ENV] = str(launch.workdir)
    env.pop(FILE_ENV, None)
    if launch.file:
        env[FILE_ENV] = launch.file
    return env


def launch(launch: Launch) -> int:
    """Run the server until it exits or Ctrl-C; returns its exit status."""
    print(f"rubric builder: {launch.url}  (working directory {launch.workdir}; Ctrl-C to stop)", flush=True)
    proc = subprocess.Popen(command(launch), env=environment(launch), cwd=launch.workdir)

    def stop(signum: int, frame: object) -> None:  # SIGTERM stops the server too, not just this process
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            return proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()
