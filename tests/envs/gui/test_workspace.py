"""File access is confined to the working directory: traversal and links leading out are refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envs.gui.workspace import RUBRIC_SUFFIXES, Workspace, WorkspaceError


def test_paths_inside_resolve_and_outside_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "r.yaml").write_text("x: 1\n")
    (tmp_path / "secret.yaml").write_text("x: 2\n")
    ws = Workspace.at(root)
    assert ws.read_path("sub/r.yaml") == root / "sub" / "r.yaml"
    assert ws.read_path(str(root / "sub" / "r.yaml")) == root / "sub" / "r.yaml"  # absolute, but inside
    for bad in ["../secret.yaml", "sub/../../secret.yaml", str(tmp_path / "secret.yaml"), "/etc/passwd"]:
        with pytest.raises(WorkspaceError, match="outside the working directory"):
            ws.read_path(bad)
        with pytest.raises(WorkspaceError, match="outside the working directory"):
            ws.write_path(bad)
    with pytest.raises(WorkspaceError, match="does not exist"):
        ws.write_path("missing_folder/x.yaml")
    with pytest.raises(WorkspaceError, match="directory"):
        ws.write_path("sub")


def test_links_leading_out_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "outside.yaml").write_text("x: 1\n")
    os.symlink(tmp_path / "outside.yaml", root / "link.yaml")
    os.symlink(tmp_path, root / "up")
    (root / "inside.yaml").write_text("x: 1\n")
    os.symlink(root / "inside.yaml", root / "alias.yaml")
    ws = Workspace.at(root)
    with pytest.raises(WorkspaceError, match="outside"):
        ws.read_path("link.yaml")
    with pytest.raises(WorkspaceError, match="outside"):
        ws.write_path("up/new.yaml")  # writing through a linked folder
    assert ws.read_path("alias.yaml") == root / "inside.yaml"
    assert ws.files(RUBRIC_SUFFIXES) == ["alias.yaml", "inside.yaml"]  # link.yaml and up/ lead outside
