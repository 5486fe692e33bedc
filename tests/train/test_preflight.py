"""``python -m train CONFIG``: every file the config names is read and checked before anything heavy loads;
each problem is one line (``FILE:LINE: where: what`` or ``FILE: field: what``) and exit 2, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from train.__main__ import main

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """\
seed: 0
model:
  name_or_path: smollm2
env:
  rubric: configs/rubrics/first_responder.yaml
  scenarios: configs/scenarios/first_responder_train.yaml
  eval_scenarios: configs/scenarios/first_responder_heldout.yaml
  judge: rules
warm_start:
  demonstrations: null
"""
"""A multi-step run config; ``env.rubric`` is on line 5, ``env.scenarios`` on 6, ``env.judge`` on 8."""


@pytest.fixture
def trainer(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Stands in for ``train.trainer``: records the configs it is asked to train (none, when refused)."""
    calls: list[object] = []
    stopped = type("TooManyFailedRollouts", (RuntimeError,), {})  # what the command catches of a run
    stand_in = types.SimpleNamespace(train=calls.append, TooManyFailedRollouts=stopped)
    monkeypatch.setitem(sys.modules, "train.trainer", stand_in)
    monkeypatch.chdir(ROOT)
    return calls


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *overrides: str, text: str = CONFIG) -> tuple:
    config = tmp_path / "run.yaml"
    config.write_text(text)
    code = main([str(config), *overrides])
    return code, capsys.readouterr().err, config


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], "{config}:5: env.rubric: file not found: configs/rubrics/nope.yaml"),
        (
            ["env.rubric=configs/rubrics/nope.yaml"],
            "{config}: env.rubric: file not found: configs/rubrics/nope.yaml",
        ),
        (
            ["env.scenarios=configs/scenarios/nope.yaml"],
            "{config}: env.scenarios: file not found: configs/scenarios/nope.yaml",
        ),
        (["env.judge=gpt"], "{config}: env.judge: 'gpt' is not one of the rubric's judges (rules, llm)"),
        (
            ["env.judge_base_url=http://h:1/v1"],
            "{config}: env.judge_base_url: the judge in use, 'rules', is not an LLM judge",
        ),
        (
            ["warm_start.demonstrations=demos.jsonl"],
            "{config}: warm_start.demonstrations: file not found: demos.jsonl",
        ),
        (["model.name_or_path=./models/nope"], "{config}: model.name_or_path: no such folder: ./models/nope"),
    ],
)
def test_a_missing_file_or_an_unknown_name_is_one_line_before_any_model_loads(
    tmp_path, capsys, trainer, overrides: list[str], message: str
) -> None:
    text = CONFIG.replace("first_responder.yaml", "nope.yaml") if not overrides else CONFIG
    code, err, config = _run(tmp_path, capsys, *overrides, text=text)
    assert (code, err, trainer) == (2, f"train: {message.format(config=config)}\n", [])


def test_an_error_inside_a_named_file_is_that_file_s_line(tmp_path, capsys, trainer) -> None:
    code, err, _ = _run(tmp_path, capsys)  # the files are read, and good ones pass
    assert code == 0 and len(trainer) == 1, err
    trainer.clear()

    rubric = tmp_path / "rubric.yaml"
    rubric.write_bytes(b'format_version: 1\nrequirements:\n  - {name: a, question: "A\0?"}\n')
    code, err, _ = _run(tmp_path, capsys, f"env.rubric={rubric}")
    expected = (
        f"train: {rubric}:3: not valid YAML: a NUL byte at column 27 (YAML does not allow it in a file)\n"
    )
    assert (code, err, trainer) == (2, expected, [])

    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "2+2?"}\n{"answer": "4"}\n')
    single = ["env.type=single_turn", "env.rubric=rubrics.ready_made:toy_vowels", f"env.data={data}"]
    code, err, _ = _run(tmp_path, capsys, *single)
    assert (code, err, trainer) == (2, f"train: {data}:2: prompt: is missing\n", [])


def test_the_command_exits_2_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(CONFIG.replace("first_responder.yaml", "nope.yaml"))
    done = subprocess.run(
        [sys.executable, "-m", "train", str(config)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr == f"train: {config}:5: env.rubric: file not found: configs/rubrics/nope.yaml\n"


CRITERIA_CONFIG = """\
seed: 0
model:
  name_or_path: smollm2
env:
  type: criteria
  data: DATA
  eval_fraction: 0.25
"""
"""A criteria run config; ``env.data`` is on line 6."""


def test_a_criteria_file_with_bad_lines_is_refused_whole_before_any_model_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], trainer: list[object]
) -> None:
    good = ROOT / "configs/data/first_aid_criteria_train.jsonl"
    lines = good.read_text().splitlines()
    data = tmp_path / "data.jsonl"
    bad = lines[2].replace('"weight": 4', '"weight": "four"', 1)
    data.write_text("\n".join([*lines[:2], bad, *lines[3:5], '{"id": "x", "prompt": "?"}']) + "\n")
    code, err, _ = _run(tmp_path, capsys, text=CRITERIA_CONFIG.replace("DATA", str(data)))
    assert code == 2 and trainer == []
    assert f"{data}:3: criteria[0].weight" in err and "2 of 6 native records are bad" in err
    # LLM-judged criteria without a judge: the config field that must change, before any model loads
    data.write_text(
        '{"id": "a", "prompt": "Hi?", "criteria": [{"weight": 1, "requirement": "Says hello"}]}\n'
        '{"id": "b", "prompt": "Yo?", "criteria": [{"weight": 1, "requirement": "Says hello"}]}\n'
    )
    code, err, config = _run(tmp_path, capsys, text=CRITERIA_CONFIG.replace("DATA", str(data)))
    assert code == 2 and trainer == [] and f"{config}: env.judge_base_url: 2 example(s)" in err


def test_a_criteria_file_whose_weights_add_up_past_a_float_is_refused_before_any_model_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], trainer: list[object]
) -> None:
    # each weight finite, their sum inf: it used to load, then every score and the rubric probe failed
    data = tmp_path / "data.jsonl"
    huge = [{"weight": 1e308, "requirement": "Says hello", "rule": {"any": ["hello"]}}] * 2
    data.write_text(json.dumps({"id": "a", "prompt": "Hi?", "criteria": huge}) + "\n")
    code, err, _ = _run(tmp_path, capsys, text=CRITERIA_CONFIG.replace("DATA", str(data)))
    assert code == 2 and trainer == []
    assert err.startswith(
        f"train: {data}:1: criteria[1].weight: the positive weights up to this one add up to inf"
    )


def test_a_balanced_sampler_with_nothing_to_balance_is_refused_before_any_model_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], trainer: list[object]
) -> None:
    import yaml

    balanced = CONFIG + "rollout:\n  sampler: balanced\n"  # rollout.sampler on line 12
    code, err, _ = _run(tmp_path, capsys, text=balanced)  # safe scenes and unsafe ones: two strata
    assert code == 0 and len(trainer) == 1, err
    trainer.clear()
    # the safe scenes only: one stratum, nothing to balance
    scenarios = yaml.safe_load((ROOT / "configs/scenarios/first_responder_train.yaml").read_text())
    safe = [s for s in scenarios["scenarios"] if s["answers"]["scene_safety"]["answer"] == 1.0]
    assert 0 < len(safe) < len(scenarios["scenarios"])
    only_safe = tmp_path / "safe.yaml"
    only_safe.write_text(yaml.safe_dump({**scenarios, "scenarios": safe}))
    code, err, config = _run(tmp_path, capsys, f"env.scenarios={only_safe}", text=balanced)
    expected = (
        f"train: {config}:12: rollout.sampler: 'balanced' needs at least two strata to balance, and every "
        "training example is in 'scene_safety=1.0'; use 'shuffle'\n"
    )
    assert (code, err, trainer) == (2, expected, [])
    # an environment without strata
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "2+2?", "answer": "4"}\n' * 8)
    single = ["env.type=single_turn", "env.rubric=rubrics.ready_made:toy_vowels", f"env.data={data}"]
    code, err, config = _run(tmp_path, capsys, *single, "rollout.sampler=balanced")
    assert (code, trainer) == (2, []) and err.startswith(
        f"train: {config}: rollout.sampler: 'balanced' shares each step out between the strata"
    )
