"""The console script, bad-input errors, the package layering and the config files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from train.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_score_command_scores_the_demo_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "scored.jsonl"
    assert main(["score", str(ROOT / "configs/data/math_demo.jsonl"), "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rollouts"] == 16 and summary["groups"] == 4 and summary["errored"] == 0
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(scored) == 16
    by_group: dict[str, list[float]] = {}
    for s in scored:
        by_group.setdefault(s["group"], []).append(s["advantage"])
        assert set(s["metrics"]) == {"correct_answer", "think_format_reward"}
    for advantages in by_group.values():
        assert sum(advantages) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"completion": "a"}\n{"completion": \n', "bad.jsonl:2: not valid JSON"),
        ('["not", "an", "object"]\n', "bad.jsonl:1: expected a JSON object"),
        ('{"prompt": "p"}\n', "bad.jsonl:1: field 'completion' is missing"),
        ('{"completion": 3}\n', "bad.jsonl:1: field 'completion' must be a string or a list of messages"),
        ("\n", "bad.jsonl: no states"),
    ],
)
def test_bad_input_names_file_line_and_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    out = tmp_path / "out.jsonl"
    assert main(["score", str(bad), "--out", str(out)]) == 2
    assert expected in capsys.readouterr().err
    assert not out.exists()  # nothing was scored, nothing half-written


def test_bad_rubric_spec_is_explained(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"completion": "x"}\n')
    assert main(["score", str(data), "--rubric", "rubrics.ready_made:nope"]) == 2
    assert "module 'rubrics.ready_made' has no attribute 'nope'" in capsys.readouterr().err
    assert main(["score", str(data), "--rubric", "no_colon"]) == 2
    assert "expected 'module:attribute'" in capsys.readouterr().err
    assert main(["score", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl: file not found" in capsys.readouterr().err


def test_rubrics_imports_no_heavy_modules_and_no_upper_layer() -> None:
    code = (
        "import sys, rubrics, rubrics.score_command, rubrics.ready_made, train.cli\n"
        "bad = [m for m in ('torch', 'transformers', 'envs', 'train.trainer') if m in sys.modules]\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


def test_every_config_file_parses() -> None:
    files = [p for p in (ROOT / "configs").rglob("*") if p.is_file()]
    assert files, "configs/ has no files"
    for path in files:
        text = path.read_text()
        if path.suffix in {".yaml", ".yml"}:
            yaml.safe_load(text)
        elif path.suffix == ".json":
            json.loads(text)
        elif path.suffix == ".jsonl":
            for line in text.splitlines():
                if line.strip():
                    json.loads(line)
        else:
            pytest.fail(f"unexpected file in configs/: {path}")


def test_console_script_prints_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "train.cli", "--version"], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0 and out.stdout.startswith("rubric-grpo ")


def test_train_subcommand_is_python_m_train(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rubric-grpo train CONFIG [overrides]`` checks and trains as ``python -m train`` does, exit codes and
    messages included."""
    import types

    from train.__main__ import main as python_m_train

    calls: list = []
    stub = types.SimpleNamespace(train=calls.append, TooManyFailedRollouts=RuntimeError)
    monkeypatch.setitem(sys.modules, "train.trainer", stub)
    monkeypatch.chdir(ROOT)
    config = str(ROOT / "configs/train/tiny_test.yaml")
    assert main(["train", config, "max_steps=1", "seed=5"]) == 0
    assert [(c.max_steps, c.seed) for c in calls] == [(1, 5)]
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout: {group_size: 1}\n")
    errors = []
    for run in (lambda: main(["train", str(bad)]), lambda: python_m_train([str(bad)])):
        assert run() == 2
        errors.append(capsys.readouterr().err)
    assert (
        errors[0]
        == errors[1]
        == f"train: {bad}: rollout.group_size: Input should be greater than or equal to 2\n"
    )
    assert len(calls) == 1


def test_tests_have_a_folder_for_every_package_folder() -> None:
    """The README's layout: ``tests/`` mirrors the packages' folders, and a test file named for a module sits
    at that module's path (``tests/<folder>/test_<module>.py`` only where ``<folder>/<module>.py`` exists, or
    names a flow or a concept, never a module of another folder)."""
    folders = {
        p.parent.relative_to(ROOT) for pkg in ("rubrics", "envs", "train") for p in (ROOT / pkg).rglob("*.py")
    }
    missing = sorted(str(f) for f in folders if not (ROOT / "tests" / f).is_dir())
    assert missing == [], f"package folders without a tests/ folder: {missing}"
    modules = {
        p.relative_to(ROOT).with_suffix("")
        for pkg in ("rubrics", "envs", "train")
        for p in (ROOT / pkg).rglob("*.py")
    }
    by_name: dict[str, set[Path]] = {}
    for module in modules:
        by_name.setdefault(module.name, set()).add(module.parent)
    astray = []
    for test in (ROOT / "tests").rglob("test_*.py"):
        folder, name = test.parent.relative_to(ROOT / "tests"), test.stem.removeprefix("test_")
        homes = by_name.get(name, set())
        if homes and folder not in homes and folder.parts and folder.parts[0] in ("rubrics", "envs", "train"):
            astray.append(f"{test.relative_to(ROOT)} (the module is in {', '.join(sorted(map(str, homes)))})")
    assert astray == [], f"tests named for a module of another folder: {astray}"
