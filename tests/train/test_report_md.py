"""``report.md`` from a run's held-out results, in memory as the trainer keeps them and read back from a
finished folder (hand-derived values)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from envs.evaluation import EvalSummary, Evaluation
from envs.rollout import ScoredRollout
from rubrics.multistep.probe import PolicyScore
from rubrics.types import EvaluationResult, RequirementResult
from tests.support.rollouts import scored
from train.report_md import write_report_md
from train.run_folder import AFTER, BEFORE, WARM_START, HeldOutResults, RunFolder, read_held_out, write_probe


def _evaluation(rows: list[ScoredRollout], examples: int) -> Evaluation:
    """An evaluation of ``rows``; its summary's own interval (0.001) is one the report must not show."""
    mean = sum(r.reward for r in rows) / len(rows)
    summary = EvalSummary(len(rows), examples, reward_mean=mean, reward_ci95=0.001, completion_tokens=10)
    return Evaluation(summary, {}, rows)


def _rewarded(rewards: dict[str, list[float]]) -> Evaluation:
    rows = [scored(scenario=name, reward=r, prompt=name) for name, values in rewards.items() for r in values]
    return _evaluation(rows, len(rewards))


def test_report_md_gives_one_interval_for_one_number(tmp_path: Path) -> None:
    """The headline and the table give the same, clustered, interval (not the summary's unclustered one)."""
    held_out = HeldOutResults()
    held_out.record(BEFORE, "", _rewarded({"a": [0.0, 0.0], "b": [0.0, 0.0], "c": [0.0, 0.0]}))
    held_out.record(AFTER, "", _rewarded({"a": [0.0, 0.2], "b": [0.4, 0.6], "c": [0.3, 0.3]}))
    report = write_report_md(RunFolder(tmp_path), held_out).read_text()
    # after: scenario means 0.1, 0.5, 0.3 (mean 0.3); residual sums -0.4, +0.4, 0 -> variance 3/2 * 0.32 / 36
    half = 4.303 * math.sqrt(1.5 * 0.32 / 36)  # = 0.497 (t with 2 degrees of freedom)
    assert report.startswith(f"# Run report: {tmp_path.name}\n")
    assert f"{0.3:.3f} ± {half:.3f} after" in report
    assert f"| reward mean ± 95% CI (clustered) | 0.000 ± 0.000 | 0.300 ± {half:.3f} |" in report
    # the change, paired by scenario: differences 0.1, 0.5, 0.3: mean 0.3, sd 0.2, 4.303 * 0.2 / sqrt(3)
    assert f"change +0.300 ± {4.303 * 0.2 / math.sqrt(3):.3f}" in report
    assert "0.001" not in report


def _decided(right: dict[str, list[bool]]) -> Evaluation:
    rows = [
        scored(
            scenario=scenario,
            reward=0.5 * ok,
            prompt=scenario,
            multistep=EvaluationResult([RequirementResult("safety", 0, float(ok), 1.0, ok)]),
        )
        for scenario, oks in right.items()
        for ok in oks
    ]
    return _evaluation(rows, len(right))


def _first_decisions() -> HeldOutResults:
    held_out = HeldOutResults()
    held_out.record(BEFORE, "", _decided({"a": [False], "b": [False], "c": [False]}))
    held_out.record(WARM_START, "", _decided({"a": [True], "b": [False], "c": [False]}))
    held_out.record(AFTER, "", _decided({"a": [True], "b": [True], "c": [False]}))
    held_out.record_probe("", [])
    return held_out


def test_report_md_pairs_the_first_decision(tmp_path: Path) -> None:
    """Beside the reward, report.md gives the trained model minus each earlier evaluation in how often the
    first decision (the level-0 requirements) is right, paired by scenario, by hand."""
    report = write_report_md(RunFolder(tmp_path), _first_decisions()).read_text()
    # per-scenario differences against the warm start: 0, 1, 0 (mean 1/3, sd 0.577); against untrained 1, 1, 0
    half = 4.303 * math.sqrt(1 / 3) / math.sqrt(3)
    assert (
        f"- first decision right, trained minus warm start only: +0.333 ± {half:.3f} over 3 scenarios"
        in report
    )
    assert f"- first decision right, trained minus untrained: +0.667 ± {half:.3f} over 3 scenarios" in report
    assert "## Held-out, beside the trivial policies" in report  # probed, with no trivial policy to show


def test_a_report_needs_both_evaluations(tmp_path: Path) -> None:
    held_out = HeldOutResults()
    held_out.record(BEFORE, "", _rewarded({"a": [0.0]}))
    with pytest.raises(ValueError, match=r"^eval_after: no such held-out evaluation in the run"):
        write_report_md(RunFolder(tmp_path), held_out)


def _write(run: RunFolder, held_out: HeldOutResults) -> None:
    """``held_out`` into ``run``'s files, as the trainer writes them."""
    for name, found in held_out.sets.items():
        for point, evaluation in found.evaluations.items():
            folder = run.evaluation(point, name)
            folder.path.mkdir(parents=True)
            folder.summary.write_text(json.dumps(evaluation.as_dict()))
            folder.rollouts.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in evaluation.rollouts))
        if found.probe is not None:
            write_probe(run, name, found.probe)


def test_a_finished_folder_reports_as_the_run_did(tmp_path: Path) -> None:
    """Read back from the files, the results make the same report.md as in memory: a further set's section
    and the pooled one included, and the probe beside them."""
    held_out = _first_decisions()
    probe = PolicyScore("empty", 3, 3, 0.0, 0.0, scenario_rewards={"a": 0.0, "b": 0.0, "c": 0.0})
    held_out.record_probe("", [probe])
    held_out.record(BEFORE, "new", _rewarded({"x": [0.0], "y": [0.5]}))
    held_out.record(AFTER, "new", _rewarded({"x": [1.0], "y": [0.5]}))
    held_out.record_probe(
        "new", [PolicyScore("empty", 2, 2, 0.0, 0.0, scenario_rewards={"x": 0.0, "y": 0.0})]
    )
    (tmp_path / "memory" / "run").mkdir(parents=True)
    in_memory = write_report_md(RunFolder(tmp_path / "memory" / "run"), held_out).read_text()
    run = RunFolder(tmp_path / "files" / "run")
    _write(run, held_out)
    assert write_report_md(run, read_held_out(run)).read_text() == in_memory
    assert "## Further held-out set: new" in in_memory
    # trained minus untrained on "new": differences 1.0 and 0.0 -> +0.500
    assert "- trained minus untrained: +0.500 ± " in in_memory
    pooled = in_memory[in_memory.index("## Pooled over every held-out set (held-out, new)") :]
    # rewards by scenario of the trained model: a 0.5, b 0.5, c 0, x 1, y 0.5; "empty" scores 0 on all five
    assert "- empty: +0.500 ± " in pooled and "over 5 scenarios" in pooled


def test_the_training_sample_has_its_own_section_and_is_not_pooled_with_held_out_sets(tmp_path: Path) -> None:
    """``logging.train_eval_sample``: the training scenarios' evaluations are reported beside the held-out
    sets (warm start against trained, paired, and whether the rise is beyond its interval), never as a
    held-out set, and never in the pooled held-out rows."""
    from train.config import TRAIN_SET

    held_out = HeldOutResults()
    held_out.record(BEFORE, "", _rewarded({"a": [0.0], "b": [0.0]}))
    held_out.record(AFTER, "", _rewarded({"a": [0.1], "b": [0.0]}))
    held_out.record(BEFORE, TRAIN_SET, _rewarded({"t1": [0.0], "t2": [0.0], "t3": [0.0]}))
    held_out.record(WARM_START, TRAIN_SET, _rewarded({"t1": [0.2], "t2": [0.3], "t3": [0.1]}))
    held_out.record(AFTER, TRAIN_SET, _rewarded({"t1": [0.8], "t2": [0.9], "t3": [0.8]}))
    held_out.record_probe(
        TRAIN_SET,
        [PolicyScore("majority", 3, 3, 0.5, 0.0, scenario_rewards={"t1": 0.5, "t2": 0.5, "t3": 0.5})],
    )
    run = RunFolder(tmp_path / "run")
    _write(run, held_out)
    report = write_report_md(run, read_held_out(run)).read_text()
    section = report[report.index("## Training scenarios: a fixed sample of 3") :]
    # trained minus warm start: 0.6, 0.6, 0.7 -> +0.633, beyond its interval
    assert (
        "the reward rose by more than its interval from the warm start only model: 0.200 to 0.833, +0.633 ±"
        in section
    )
    assert "| training | before | after the warm start | after |" in section
    assert "- majority: +0.333 ± " in section
    assert "Further held-out set: train" not in report and "## Pooled" not in report
