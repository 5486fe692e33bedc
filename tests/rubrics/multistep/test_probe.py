"""The rubric probe: trivial policies scored through the real walk, and intervals clustered by scenario."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from rubrics.intervals import clustered_mean_ci, t95
from rubrics.multistep import BinaryRequirement, MultiStepRubric, Scenario
from rubrics.multistep.probe import (
    PolicyScore,
    ProbeRollout,
    majority_answers,
    paired_difference,
    probe,
    score_rollouts,
)
from rubrics.types import RequirementResult

from .helpers import rule_judges

ROOT = Path(__file__).resolve().parents[3]


def triage_rubric() -> MultiStepRubric:
    """safe? -> (yes) responsive? ; (no) stage. 'responsive' is revealed only after a safe scene."""
    return MultiStepRubric(
        [
            BinaryRequirement(
                name="safe",
                question="?",
                dependencies={1.0: ["responsive"], 0.0: ["stage"]},
                rules={
                    1.0: {"any": ["scene is safe"], "none": ["not safe"]},
                    0.0: {"any": ["scene is not safe"]},
                },
            ),
            BinaryRequirement(
                name="responsive",
                question="?",
                rules={1.0: {"any": ["patient is alert"]}, 0.0: {"any": ["patient is unresponsive"]}},
            ),
            BinaryRequirement(name="stage", question="?", rules={1.0: {"any": ["wait for police"]}}),
        ],
        rule_judges(),
        reward_strategy={"type": "sum", "normalized": True},
    )


def scenarios() -> list[Scenario]:
    """Three safe scenes (two alert patients, one unresponsive), one unsafe one."""
    safe = [
        Scenario(
            name=f"safe{i}",
            prompt=f"Dispatch {i}.",
            answers={"safe": 1.0, "responsive": alert},
            revealed_info={"safe": "You reach the patient."},
        )
        for i, alert in enumerate([1.0, 1.0, 0.0])
    ]
    unsafe = Scenario(name="unsafe", prompt="Shots fired.", answers={"safe": 0.0, "stage": 1.0})
    return [*safe, unsafe]


def test_clustered_interval_of_equal_clusters_is_the_t_interval_of_cluster_means() -> None:
    values = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.5, 0.5]
    clusters = ["a", "a", "a", "b", "b", "b", "c", "c", "c"]
    mean, half = clustered_mean_ci(values, clusters)
    means = [statistics.fmean(values[i : i + 3]) for i in (0, 3, 6)]
    assert mean == pytest.approx(statistics.fmean(values))
    assert half == pytest.approx(t95(2) * statistics.stdev(means) / math.sqrt(3))
    # treating the 9 values as independent would claim a narrower interval
    assert half > 1.96 * statistics.stdev(values) / 3
    assert math.isnan(clustered_mean_ci([1.0, 0.0], ["a", "a"])[1])
    assert t95(1) == pytest.approx(12.706) and t95(100) == 1.96


def test_majority_answer_of_each_requirement() -> None:
    assert majority_answers(triage_rubric(), scenarios()) == {"safe": 1.0, "responsive": 1.0, "stage": 1.0}


async def test_probe_scores_each_policy_through_the_walk() -> None:
    rows = {row.policy: row for row in await probe(triage_rubric(), scenarios(), max_turns=3)}
    assert list(rows) == ["empty", "echo", "majority", "every_phrase", "ideal"]
    assert rows["empty"].reward_mean == 0.0 and rows["echo"].reward_mean == 0.0
    # majority: "scene is safe" and "patient is alert" every turn: full marks on the two alert patients,
    # half on the unresponsive one, nothing on the unsafe scene
    majority = rows["majority"]
    assert majority.reward_mean == pytest.approx((1 + 1 + 0.5 + 0) / 4)
    assert majority.root_accuracy == {"safe=0.0": (0, 1), "safe=1.0": (3, 3)}
    assert majority.pass_rates == {"responsive": (2, 3), "safe": (3, 4)}
    # every phrase: 'not safe' vetoes the safe answer, and the unsafe answer's phrase is there too
    assert rows["every_phrase"].root_accuracy["safe=1.0"] == (0, 3)
    ideal = rows["ideal"]
    assert ideal.reward_mean == 1.0 and ideal.reward_ci95 == 0.0
    assert ideal.level_pass_rates == {0: (4, 4), 1: (4, 4)}


async def test_a_revealed_text_makes_the_ideal_policy_wait_a_turn() -> None:
    """With one turn, what the reveal unlocks is never judged: the ceiling is below 1.0."""
    rows = {row.policy: row for row in await probe(triage_rubric(), scenarios(), max_turns=1)}
    assert rows["ideal"].reward_mean == pytest.approx((0.5 * 3 + 1.0) / 4)


def test_scored_rollouts_round_trip_and_count_scenarios_once() -> None:
    def safe(truth: float, correct: bool) -> list[RequirementResult]:
        return [RequirementResult("safe", 0, truth if correct else 1.0 - truth, truth, correct)]

    rollouts = [ProbeRollout("s1", 1.0, safe(1.0, True)), ProbeRollout("s1", 0.0, safe(1.0, False))]
    rollouts.append(ProbeRollout("s2", 0.5, safe(0.0, True)))
    row = score_rollouts("model", rollouts, ["safe"])
    assert (row.rollouts, row.scenarios) == (3, 2)
    assert row.root_accuracy == {"safe=0.0": (1, 1), "safe=1.0": (1, 2)}
    assert row.scenario_rewards == {"s1": 0.5, "s2": 0.5}
    assert type(row).from_dict(json.loads(json.dumps(row.as_dict()))) == row


def test_paired_difference_is_taken_per_scenario() -> None:
    a = PolicyScore("a", scenario_rewards={"s1": 0.9, "s2": 0.5, "s3": 0.4, "only_a": 1.0})
    b = PolicyScore("b", scenario_rewards={"s1": 0.8, "s2": 0.3, "s3": 0.1})
    mean, half, n = paired_difference(a, b)
    diffs = [0.1, 0.2, 0.3]
    assert n == 3 and mean == pytest.approx(0.2)
    assert half == pytest.approx(t95(2) * statistics.stdev(diffs) / math.sqrt(3))


def test_cli_prints_the_table_and_refuses_a_bad_file(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "train.cli", "rubric", "probe", "configs/rubrics/first_responder.yaml"]
    out, demos = tmp_path / "probe.json", tmp_path / "demos.jsonl"
    ok = subprocess.run(
        [*cli, "--scenarios", "configs/scenarios/first_responder.yaml", "--json", str(out), "--demos", str(demos)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert "| majority |" in ok.stdout and "| ideal |" in ok.stdout
    rows = {r["policy"]: r for r in json.loads(out.read_text())}
    assert rows["ideal"]["reward_mean"] > rows["empty"]["reward_mean"]
    # the ideal policy's conversations, which the trainer's warm start loads
    from train.demonstrations import load_demonstrations

    written = [json.loads(line) for line in demos.read_text().splitlines()]
    assert len(load_demonstrations(demos)) == rows["ideal"]["scenarios"] == len(written)
    assert statistics.mean(d["reward"] for d in written) == pytest.approx(rows["ideal"]["reward_mean"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("format_version: 1\nscenarios: [{name: x}]\n")
    refused = subprocess.run(
        [*cli, "--scenarios", str(bad)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2 and "Traceback" not in refused.stderr and str(bad) in refused.stderr
