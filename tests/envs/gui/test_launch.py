"""Starting the builder: it binds localhost on a free port, and the CLI refuses a file outside the working
directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from envs.gui.launch import command, plan


def test_launch_binds_localhost_on_a_free_port(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text("x: 1\n")
    target = plan(str(tmp_path / "r.yaml"), str(tmp_path), "127.0.0.1", None)
    assert target.file == "r.yaml" and target.workdir == tmp_path.resolve() and target.port > 0
    cmd = command(target)
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert target.url == f"http://127.0.0.1:{target.port}"
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(ValueError, match="outside the working directory"):
        plan(str(tmp_path / "r.yaml"), str(tmp_path / "elsewhere"), "127.0.0.1", 1)


def test_cli_refuses_a_file_outside_the_working_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from train.cli import main

    (tmp_path / "inside").mkdir()
    assert main(["gui", str(tmp_path / "r.yaml"), "--dir", str(tmp_path / "inside")]) == 2
    assert "outside the working directory" in capsys.readouterr().err
