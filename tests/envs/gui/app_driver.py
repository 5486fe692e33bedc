"""Driving the app through Streamlit's app-testing API (no browser): start it on a working directory, go
to a section, read the texts of shown elements."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")

from streamlit.testing.v1 import AppTest

from envs.gui.launch import APP, DIR_ENV, FILE_ENV


def start(monkeypatch: pytest.MonkeyPatch, workdir: Path, file: str | None = None) -> AppTest:
    monkeypatch.setenv(DIR_ENV, str(workdir))
    if file:
        monkeypatch.setenv(FILE_ENV, file)
    else:
        monkeypatch.delenv(FILE_ENV, raising=False)
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception
    return at


def go(at: AppTest, section: str) -> AppTest:
    at.sidebar.radio(key="section").set_value(section).run()
    assert not at.exception, at.exception
    return at


def texts(elements) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(e.value) for e in elements]
