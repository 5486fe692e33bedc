"""The loading layer every file goes through (``rubrics.loading``): a corpus of malformed and unusual files,
each starting with what ``rubric-grpo rubric validate`` must print for it, plus encodings, which a text
corpus cannot hold, and the other loaders.

A corpus file starts with ``# expect:`` lines: ``# expect: MESSAGE`` (exit 2, MESSAGE the only output on
stderr) or ``# expect: ok`` (exit 0); ``# expect warning: MESSAGE`` (a warning printed, exit 0) and
``# expect --strict: MESSAGE`` (what ``--strict`` refuses it with). MESSAGE starts with the file's name, so
it reads as the user sees it. ``scenarios_*.yaml`` files are checked against ``scenario_rubric.yaml``;
``criteria_*.yaml`` files are weighted-criteria lists, read by ``CriteriaRubric.from_file``."""

from __future__ import annotations

import contextlib
import copy
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from rubrics.criteria.rubric import CriteriaLoadError, CriteriaRubric
from rubrics.loading import FileLoadError, parse_yaml
from rubrics.multistep.rubric_io import RubricFileError, load_scenarios
from rubrics.multistep.scenario import ScenarioError
from train.cli import main
from train.config_files import ConfigError, load_config

CORPUS = Path(__file__).parent / "loading_corpus"
RUBRIC = "format_version: 1\njudges: {rules: {type: rules}}\nrequirements:\n  - {name: café, type: binary, question: Oui, rules: {1.0: {any: [oui]}}}\n"
PREFIX = "rubric-grpo rubric validate: "


def _validate(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    args = ["rubric", "validate", str(path), *extra]
    if path.name.startswith("scenarios_"):
        args = ["rubric", "validate", str(CORPUS / "scenario_rubric.yaml"), "--scenarios", str(path), *extra]
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def _expectations(path: Path) -> dict[str, list[str]]:
    """The file's ``# expect[ KIND]: MESSAGE`` lines by kind ("" for the plain one)."""
    found: dict[str, list[str]] = {"": [], "warning": [], "--strict": []}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("# expect"):
            break
        kind, _, message = line.removeprefix("# expect").partition(": ")
        found[kind.strip()].append(message)
    return found


@pytest.mark.parametrize(
    "path", sorted(set(CORPUS.glob("*.yaml")) - set(CORPUS.glob("criteria_*.yaml"))), ids=lambda p: p.name
)
def test_every_corpus_file_gets_its_message(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = _expectations(path)
    assert len(expected[""]) == 1, "every corpus file starts with one '# expect:' line"
    code, out, err = _validate(path, capsys)
    assert "Traceback" not in out + err
    if expected[""] == ["ok"]:
        warnings = [f"{PREFIX}warning: {CORPUS}/{message}" for message in expected["warning"]]
        assert code == 0 and err.splitlines() == warnings, err
        assert "ok" in out
    else:
        assert code == 2 and err.strip() == f"{PREFIX}{CORPUS}/{expected[''][0]}", err
    for message in expected["--strict"]:
        code, out, err = _validate(path, capsys, "--strict")
        assert code == 2 and err.strip() == f"{PREFIX}{CORPUS}/{message}" and "Traceback" not in err, err


@pytest.mark.parametrize("path", sorted(CORPUS.glob("criteria_*.yaml")), ids=lambda p: p.name)
def test_every_criteria_corpus_file_gets_its_message(path: Path) -> None:
    """``criteria_*.yaml`` files are weighted-criteria lists, read by ``CriteriaRubric.from_file``."""
    [expected] = _expectations(path)[""]
    with pytest.raises(CriteriaLoadError) as err:
        CriteriaRubric.from_file(path)
    assert str(err.value) == f"{CORPUS}/{expected}"


def test_scenario_warnings_reach_the_caller_and_strict_raises() -> None:
    from rubrics.multistep.rubric_io import load_rubric

    rubric = load_rubric(CORPUS / "scenario_rubric.yaml")
    path = CORPUS / "scenarios_reveal_off_path.yaml"
    warnings: list[RubricFileError] = []
    assert len(load_scenarios(path, rubric, warn=warnings.append)) == 1
    assert [(w.line, w.field) for w in warnings] == [
        (12, "scenarios[0].revealed_info.severity"),
        (13, "scenarios[0].revealed_info.triage"),
    ]
    with pytest.raises(RubricFileError) as err:
        load_scenarios(path, rubric, strict=True)
    assert (err.value.file, err.value.line) == (str(path), 12) and isinstance(err.value, FileLoadError)


def test_jsonl_scenarios_name_their_line(tmp_path: Path) -> None:
    from rubrics.multistep.rubric_io import load_rubric

    path = tmp_path / "s.jsonl"
    path.write_text(
        '{"name": "a", "prompt": "P", "answers": {"safe": 1}}\n\n'
        '{"name": "b", "prompt": [{"content": "P"}], "answers": {"safe": 1}}\n'
    )
    with pytest.raises(RubricFileError, match=r"s\.jsonl:3: prompt\[0\]\.role: is missing$"):
        load_scenarios(path, load_rubric(CORPUS / "scenario_rubric.yaml"))


@pytest.mark.parametrize(
    ("encoding", "message"),
    [
        ("utf-16", "the file is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8"),
        ("latin-1", "4: not UTF-8: byte 0xe9 at offset 77 (invalid continuation byte); save it as UTF-8"),
        ("utf-8-sig", None),  # a UTF-8 byte-order mark is fine
    ],
)
def test_encodings(encoding: str, message: str | None, tmp_path: Path, capsys) -> None:
    path = tmp_path / "rubric.yaml"
    path.write_bytes(RUBRIC.encode(encoding))
    code, _, err = _validate(path, capsys)
    if message is None:
        assert code == 0, err
    else:
        assert code == 2 and err.strip().startswith(f"rubric-grpo rubric validate: {path}") and message in err


def test_run_configs_and_criteria_files_read_the_same_way(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("seed: 1\nmax_steps: 2\nseed: 3\n")
    with pytest.raises(
        ConfigError, match=r"run.yaml:3: not valid YAML: duplicate key 'seed' \(first at line 1\)"
    ):
        load_config(config)
    # a number in scientific notation is a number, also in an override; an unquoted `no` is the string "no"
    cfg = load_config(None, ["optim.learning_rate=3e-6", "model.mixed_precision=no"])
    assert (cfg.optim.learning_rate, cfg.model.mixed_precision) == (3e-6, "no")
    criteria = tmp_path / "criteria.yaml"
    criteria.write_text("- {weight: 1, requirement: a}\n- {weight: 2, requirement: b, weight: 3}\n")
    with pytest.raises(CriteriaLoadError, match=r"criteria.yaml:2: not valid YAML: duplicate key 'weight'"):
        CriteriaRubric.from_file(criteria)


def test_the_error_carries_file_line_and_reason() -> None:
    with pytest.raises(FileLoadError) as err:
        parse_yaml("a: 1\na: 2\n", "x.yaml")
    assert (err.value.file, err.value.line, isinstance(err.value, ValueError)) == ("x.yaml", 2, True)
    assert parse_yaml("a: 1e-3\nb: '1e-3'\nc: 1_000\n") == {"a": 0.001, "b": "1e-3", "c": 1000}


ODD_VALUES = [
    None,
    True,
    -1,
    0,
    2.5,
    "",
    "x",
    [],
    ["a", "b"],
    [[1]],
    {},
    {"a": 1},
    date(2024, 1, 1),
    float("nan"),
]
"""What a user can write in any place of a YAML file."""


def _places(data: Any, where: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key and item of ``data``, as paths from the top."""
    children: list[tuple[Any, Any]] = []
    if isinstance(data, dict):
        children = list(data.items())
    elif isinstance(data, list):
        children = list(enumerate(data))
    return [where, *(p for key, value in children for p in _places(value, (*where, key)))]


def _replaced(data: Any, where: tuple[Any, ...], value: Any) -> Any:
    if not where:
        return value
    data = copy.deepcopy(data)
    parent = data
    for part in where[:-1]:
        parent = parent[part]
    parent[where[-1]] = value
    return data


def test_any_value_in_any_place_is_loaded_or_refused_by_name() -> None:
    """No odd value anywhere in a rubric or a scenario escapes as a Python error (``TypeError``, ...)."""
    from rubrics.multistep.rubric_io import load_rubric, rubric_from_dict, scenario_from_dict

    rubric_data = parse_yaml((CORPUS / "scenario_rubric.yaml").read_text(encoding="utf-8"))
    rubric = load_rubric(CORPUS / "scenario_rubric.yaml")
    scenario_data = {
        "name": "s",
        "prompt": [{"role": "user", "content": "A cyclist fell."}],
        "completion": "Is it safe?",
        "answers": {"safe": {"answer": 1.0, "reasoning": "r"}, "severity": 2, "triage": [1.0, 0.0, 0.0]},
        "revealed_info": {"safe": "She is conscious.", "severity": "Blood."},
    }
    for where in _places(rubric_data):
        for value in ODD_VALUES:
            try:
                rubric_from_dict(_replaced(rubric_data, where, value), "r.yaml")
            except RubricFileError as exc:
                assert str(exc).startswith("r.yaml"), exc
    for where in _places(scenario_data):
        for value in ODD_VALUES:
            with contextlib.suppress(RubricFileError, ScenarioError):  # anything else fails the test
                scenario_from_dict(_replaced(scenario_data, where, value), "s.yaml").validate(rubric)
