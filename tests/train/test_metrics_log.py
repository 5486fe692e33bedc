"""Run logging: offline wandb under the run folder with no network traffic, JSONL lines, resume by run id."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("wandb")

from train.config import LoggingConfig
from train.metrics_log import RunLogger, wandb_mode
from train.run_folder import RunFolder


class _Sink:
    """A local TCP listener standing in for every remote host: it counts the connections it receives."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def sink(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Sink]:
    """Offline wandb with every wandb folder in tmp, no API key, and all traffic pointed at a counting sink."""
    server = _Sink()
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # no ~/.netrc key
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-dir"))
    for name in ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / name.lower()))
    monkeypatch.setenv("WANDB_BASE_URL", server.url)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, server.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    yield server
    server.close()


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_offline_run_logs_locally_and_never_the_network(tmp_path: Path, sink: _Sink) -> None:
    out = tmp_path / "run"
    # Online is asked for, but no key is configured: the run stays offline.
    cfg = LoggingConfig(output_dir=str(out), wandb_mode="online", run_name="t")
    logger = RunLogger(cfg, RunFolder(Path(cfg.output_dir)), {"seed": 0, "loss": {"beta": 0.0}})
    assert logger.mode == "offline"
    logger.log(1, {"reward/mean": 0.25, "reward/std": 0.5})
    logger.log(2, {"reward/mean": 0.5, "policy/kl": float("nan")})
    logger.log_samples(2, [{"prompt": "p", "completion": "c", "reward": 1.0}, {"prompt": "q", "info": [1]}])
    logger.finish()

    run_dirs = list((out / "wandb").glob(f"offline-run-*-{logger.run_id}"))
    assert len(run_dirs) == 1 and (run_dirs[0] / f"run-{logger.run_id}.wandb").is_file()
    metrics = _lines(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    assert metrics[0]["reward/mean"] == 0.25 and metrics[0]["reward/std"] == 0.5
    assert metrics[1]["policy/kl"] is None  # NaN is written as null
    assert 0 < metrics[0]["wall_time"] <= metrics[1]["wall_time"]
    samples = _lines(out / "samples.jsonl")
    assert samples == [
        {"step": 2, "prompt": "p", "completion": "c", "reward": 1.0},
        {"step": 2, "prompt": "q", "info": [1]},
    ]
    assert sink.connections == 0


def test_resume_keeps_the_run_id_and_appends(tmp_path: Path, sink: _Sink) -> None:
    cfg = LoggingConfig(output_dir=str(tmp_path / "run"))
    first = RunLogger(cfg, RunFolder(Path(cfg.output_dir)), {})
    first.log(1, {"reward/mean": 0.1})
    first.finish()
    second = RunLogger(cfg, RunFolder(Path(cfg.output_dir)), {}, resume_run_id=first.run_id)
    assert second.run_id == first.run_id
    second.log(2, {"reward/mean": 0.2})
    second.finish()
    assert [m["step"] for m in _lines(tmp_path / "run" / "metrics.jsonl")] == [1, 2]
    assert sink.connections == 0


def test_disabled_wandb_still_writes_jsonl(tmp_path: Path, sink: _Sink) -> None:
    cfg = LoggingConfig(output_dir=str(tmp_path / "run"), wandb_mode="disabled")
    logger = RunLogger(cfg, RunFolder(Path(cfg.output_dir)), {})
    assert logger.mode == "disabled"
    logger.log(1, {"reward/mean": 1.0})
    logger.finish()
    assert _lines(tmp_path / "run" / "metrics.jsonl")[0]["reward/mean"] == 1.0
    assert not (tmp_path / "run" / "wandb").exists()


def test_non_main_process_logs_nothing(tmp_path: Path, sink: _Sink) -> None:
    cfg = LoggingConfig(output_dir=str(tmp_path / "run"))
    logger = RunLogger(cfg, RunFolder(Path(cfg.output_dir)), {}, resume_run_id="abc", enabled=False)
    assert logger.run_id == "abc"
    logger.log(1, {"reward/mean": 1.0})
    logger.log_samples(1, [{"prompt": "p"}])
    logger.finish()
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("configured", "env_mode", "key", "expected"),
    [
        ("online", None, "k" * 40, "online"),
        ("online", None, None, "offline"),  # no key configured
        ("online", "offline", "k" * 40, "offline"),  # the environment's offline wins
        ("offline", None, "k" * 40, "offline"),
        ("disabled", None, "k" * 40, "disabled"),
        ("online", "disabled", "k" * 40, "disabled"),
    ],
)
def test_wandb_mode(
    configured: str,
    env_mode: str | None,
    key: str | None,
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name, value in (("WANDB_MODE", env_mode), ("WANDB_API_KEY", key)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert wandb_mode(configured) == expected


def test_netrc_login_counts_as_a_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    netrc_file = tmp_path / ".netrc"
    netrc_file.write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    netrc_file.chmod(0o600)
    assert wandb_mode("online") == "online"


def test_disabled_wandb_is_never_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``wandb_mode: disabled`` works where wandb is not installed (GPU images often lack it): metrics and
    samples still go to the JSONL files."""
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` now raises ImportError
    cfg = LoggingConfig(output_dir=str(tmp_path / "run"), wandb_mode="disabled")
    logger = RunLogger(cfg, RunFolder(Path(cfg.output_dir)), {"seed": 0})
    logger.log(1, {"reward/mean": 0.5})
    logger.log_samples(1, [{"reward": 0.5, "completion": "hi"}])
    logger.finish()
    assert logger.run_id == ""
    assert json.loads((tmp_path / "run" / "metrics.jsonl").read_text())["reward/mean"] == 0.5
    assert json.loads((tmp_path / "run" / "samples.jsonl").read_text())["completion"] == "hi"
