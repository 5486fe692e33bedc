"""The run folder: every path of a run and every name of a held-out evaluation, spelled out by hand; a finished
folder read back into the held-out results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envs.evaluation import EvalSummary, Evaluation
from rubrics.multistep.probe import PolicyScore
from tests.support.rollouts import scored
from train.run_folder import (
    AFTER,
    BEFORE,
    WARM_START,
    HeldOutResults,
    RunFolder,
    after_step,
    read_held_out,
    write_probe,
)


def test_every_path_of_a_run() -> None:
    run = RunFolder(Path("/r"))
    assert [str(p) for p in (run.metrics, run.samples, run.report_md, run.report_png)] == [
        "/r/metrics.jsonl",
        "/r/samples.jsonl",
        "/r/report.md",
        "/r/report.png",
    ]
    assert (str(run.warm_start), str(run.warm_start_done)) == (
        "/r/warm_start",
        "/r/warm_start/warm_start.json",
    )
    assert (str(run.checkpoints), str(run.latest)) == ("/r/checkpoints", "/r/checkpoints/latest")
    checkpoint = run.checkpoint(10)
    assert str(checkpoint.path) == "/r/checkpoints/step_000010"
    assert str(run.checkpoint_staging(10).path) == "/r/checkpoints/step_000010.tmp"
    assert [str(p) for p in (checkpoint.trainer_state, checkpoint.model, checkpoint.adapter_weights)] == [
        "/r/checkpoints/step_000010/trainer_state.json",
        "/r/checkpoints/step_000010/model",
        "/r/checkpoints/step_000010/adapter/adapter_model.safetensors",
    ]
    assert run.checkpoint_step(Path("step_000010")) == 10
    assert (
        run.checkpoint_step(Path("step_000010.tmp")) is None and run.checkpoint_step(Path("latest")) is None
    )
    assert (str(run.probe()), str(run.probe("conditions"))) == ("/r/probe.json", "/r/probe_conditions.json")


def test_each_evaluation_has_one_folder_and_one_prefix() -> None:
    run = RunFolder(Path("/r"))
    names = {
        (BEFORE, ""): ("eval_before", "eval/"),
        (WARM_START, ""): ("eval_warm_start", "eval_warm_start/"),
        (after_step(20), ""): ("eval_step_20", "eval/"),  # one held-out curve, from step 0 on
        (AFTER, ""): ("eval_after", "eval_final/"),
        (BEFORE, "conditions"): ("eval_before_conditions", "eval_conditions/"),
        (WARM_START, "conditions"): ("eval_warm_start_conditions", "eval_warm_start_conditions/"),
        (after_step(20), "conditions"): ("eval_step_20_conditions", "eval_conditions/"),
        (AFTER, "conditions"): ("eval_after_conditions", "eval_final_conditions/"),
    }
    for (point, name), (folder, prefix) in names.items():
        assert (point.folder_name(name), point.prefix(name)) == (folder, prefix)
        assert run.evaluation(point, name).summary == Path("/r") / folder / "summary.json"


def _evaluation_folder(run: RunFolder, folder: str, rollouts: int) -> None:
    (run.root / folder).mkdir(parents=True)
    (run.root / folder / "summary.json").write_text(json.dumps(EvalSummary(rollouts=rollouts).as_dict()))
    line = json.dumps(scored(reward=1.0).to_dict())
    (run.root / folder / "rollouts.jsonl").write_text(f"{line}\n" * rollouts)


def test_a_finished_folder_reads_back_by_set_and_point(tmp_path: Path) -> None:
    run = RunFolder(tmp_path)
    folders = ["eval_after", "eval_step_10", "eval_before", "eval_warm_start_start", "eval_before_step_2"]
    for rollouts, folder in enumerate(folders, 1):
        _evaluation_folder(run, folder, rollouts)
    (tmp_path / "eval_warm_start").mkdir()  # a killed evaluation: no summary.json, not a result
    (tmp_path / "eval_notes").mkdir()  # not an evaluation's name
    write_probe(run, "start", [PolicyScore("empty", 1, 1, 0.25, 0.0)])
    results = read_held_out(run)
    assert list(results.sets) == ["", "start", "step_2"]  # the held-out set first, then by name
    # in the order a run makes them; an evaluation after step k is not kept for the reports
    assert list(results.sets[""].evaluations) == [BEFORE, AFTER]
    rollouts = {point.folder_name(): e.summary.rollouts for point, e in results.sets[""].evaluations.items()}
    assert rollouts == {"eval_before": 3, "eval_after": 1}
    # "start" and "step_2" are further sets' names, after the warm start's and the evaluation before training's
    assert list(results.sets["start"].evaluations) == [WARM_START]
    step_2 = results.evaluation(BEFORE, "step_2")
    assert step_2 is not None and step_2.summary.rollouts == 5
    assert results.evaluation(WARM_START, "start") is not None and results.evaluation(WARM_START) is None
    assert results.sets[""].probe is None
    assert results.sets["start"].probe == [PolicyScore("empty", 1, 1, 0.25, 0.0)]


def test_only_the_reported_evaluations_are_kept() -> None:
    with pytest.raises(
        ValueError, match=r"^eval_step_3: a run keeps only \['eval_before', 'eval_warm_start'"
    ):
        HeldOutResults().record(after_step(3), "", Evaluation(EvalSummary(), {}, []))


def test_a_bad_probe_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "probe.json").write_text(json.dumps([{"policy": "empty"}]))
    with pytest.raises(
        ValueError, match=r"probe.json: does not read as the probe's rows: KeyError\('rollouts'\)"
    ):
        read_held_out(RunFolder(tmp_path))
