"""The loading layer every file goes through (``rubrics.loading``): a corpus of malformed and unusual files,
each starting with the message ``rubric-grpo rubric validate`` must print for it (``# expect: ok`` for a
valid one), plus encodings, which a text corpus cannot hold, and the other loaders."""

from __future__ import annotations

from pathlib import Path

import pytest

from rubrics.criteria import CriteriaLoadError, CriteriaRubric
from rubrics.loading import FileLoadError, parse_yaml
from train.cli import main
from train.config import ConfigError, load_config

CORPUS = Path(__file__).parent / "loading_corpus"
RUBRIC = "format_version: 1\njudges: {rules: {type: rules}}\nrequirements:\n  - {name: café, type: binary, question: Oui, rules: {1.0: {any: [oui]}}}\n"


def _validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["rubric", "validate", str(path)])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_corpus_file_gets_its_message(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = path.read_text(encoding="utf-8").splitlines()[0].removeprefix("# expect: ")
    code, out, err = _validate(path, capsys)
    assert "Traceback" not in out + err
    if expected == "ok":
        assert code == 0 and f"{path}: ok" in out, err
    else:
        assert code == 2 and err.strip() == f"rubric-grpo rubric validate: {CORPUS / expected}", err


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
