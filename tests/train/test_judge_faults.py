"""A criteria run whose LLM judge fails mid-run (issue 51): the trainer on the tiny model and the local backend,
judged by a real HTTP server that each test starts, kills mid-step, restarts on the same port or makes
answer slowly or with invalid JSON. Nothing is mocked between the client and the server."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from envs.rollout import ScoredRollout
from rubrics.criteria.criterion import Criterion
from rubrics.criteria.example import CriteriaExample
from tests.support.judge_server import JudgeProcess, JudgeServer
from tests.train.runs import SMALL_RUN, metrics, run_config
from train import trainer
from train.checkpoint import latest_checkpoint, read_trainer_state
from train.commands import run_train
from train.config import TrainConfig
from train.run_folder import RunFolder
from train.trainer import train

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ("Says to cool the burn under running water", "Says to see a doctor if it blisters")


def llm_dataset(tmp_path: Path, requirements: Sequence[str]) -> Path:
    """Two prompts, each with ``requirements`` as criteria that only the LLM judge grades (no rule), all
    positive: one verdict per criterion and reply (``env.grader: per_criterion``)."""
    examples = [
        CriteriaExample(
            id=f"burn-{k}",
            prompt=f"I burned my hand on the stove ({k}). What now?",
            criteria=[Criterion(name=f"c{i}", weight=1.0, requirement=r) for i, r in enumerate(requirements)],
        )
        for k in range(2)
    ]
    path = tmp_path / "llm.jsonl"
    path.write_text("".join(e.model_dump_json() + "\n" for e in examples))
    return path


def judged_run(
    tmp_path: Path,
    tiny_model_dir: Path,
    base_url: str,
    *overrides: str,
    requirements: Sequence[str] = REQUIREMENTS[:1],
) -> TrainConfig:
    """``configs/train/criteria_cpu.yaml`` with ``judged_overrides``, then ``overrides``."""
    return run_config(
        "criteria_cpu.yaml",
        tiny_model_dir,
        tmp_path / "run",
        *judged_overrides(tmp_path, base_url, requirements),
        *overrides,
    )


def judged_overrides(
    tmp_path: Path, base_url: str, requirements: Sequence[str] = REQUIREMENTS[:1]
) -> list[str]:
    """Three steps of 2 prompts x 2 replies on an LLM-judged dataset (``llm_dataset``; one criterion a prompt:
    one request a reply), no held-out set, a checkpoint a step, the judge at ``base_url`` with two attempts
    a verdict."""
    return [
        "max_steps=3",
        f"env.data={llm_dataset(tmp_path, requirements)}",
        "env.eval_data=null",
        "env.eval_fraction=0",
        f"env.judge_base_url={base_url}",
        "env.judge_model=judge",
        "env.judge_max_attempts=2",
        *SMALL_RUN,
        "logging.checkpoint_every=1",
        "logging.eval_every=0",
    ]


def after_failure_check(monkeypatch: pytest.MonkeyPatch, at_step: dict[int, Callable[[], None]]) -> None:
    """Run ``at_step[k]`` right after step ``k``'s (0-based) rollouts are checked: between its scoring and
    the next step's rollouts, which are not asked for ahead (``rollout.max_off_policy_steps`` 0)."""
    check = trainer.check_failures

    def checked(rollouts: Sequence[ScoredRollout], step: int, max_fraction: float) -> None:
        check(rollouts, step, max_fraction)
        if step in at_step:
            at_step[step]()

    monkeypatch.setattr(trainer, "check_failures", checked)


def trained_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of each step's training batch, as the run makes them (0: no batch)."""
    from train import policy

    rows: list[int] = []
    make = policy.rollouts_to_batch

    def counted(*args: Any, **kwargs: Any) -> Any:
        batch = make(*args, **kwargs)
        rows.append(0 if batch is None else int(batch.input_ids_BT.shape[0]))
        return batch

    monkeypatch.setattr(policy, "rollouts_to_batch", counted)
    return rows


@pytest.mark.slow
def test_a_judge_killed_mid_step_errors_its_rollouts_and_serves_again_once_back(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    rows = trained_rows(monkeypatch)
    with JudgeProcess(delay_s=0.05) as judge:
        # step 2: the judge answers one request (one reply's verdict), then its process exits with the others
        # in flight; it starts again on the same port once step 2's rollouts are in, and step 3 asks it as
        # before, through the same client
        after_failure_check(monkeypatch, {0: lambda: judge.exit_after(1), 1: judge.restart})
        cfg = judged_run(
            tmp_path,
            tiny_model_dir,
            judge.base_url,
            "rollout.max_errored_fraction=0.75",
            "advantage.drop_zero_variance_groups=false",  # every healthy rollout trains: rows count them
        )
        train(cfg)
    steps = [r for r in metrics(tmp_path / "run") if "reward/mean" in r]
    assert len(steps) == 3
    first, killed, back = steps
    for step in (first, back):
        assert step["errored_fraction"] == 0.0 and step["judge/failures"] == 0.0
        assert step["judge/requests"] > 0 and step["criteria/met_fraction"] == 1.0
    # one answer got out, so at least one rollout is healthy; two prompts, so at least one is not
    assert 0.25 <= killed["errored_fraction"] <= 0.75
    assert killed["errored/reward_function"] == killed["errored_fraction"]
    assert killed["judge/failures"] >= 1 and killed["judge/retries"] >= 1
    assert killed["judge/faults/connection"] >= 1
    errored = round(killed["errored_fraction"] * 4)
    assert rows == [4, 4 - errored, 4]  # the errored rollouts are left out of the loss
    assert killed["reward/mean"] == 1.0  # over the healthy rollouts only: no errored one scored 0


@pytest.mark.slow
def test_a_judge_dead_past_max_errored_fraction_stops_the_run_naming_it_and_the_step(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    with JudgeProcess(delay_s=0.05) as judge:
        after_failure_check(monkeypatch, {0: lambda: judge.exit_after(0)})  # dies at step 2's first request
        overrides = [
            f"model.name_or_path={tiny_model_dir}",
            f"logging.output_dir={tmp_path / 'run'}",
            *judged_overrides(tmp_path, judge.base_url),
            "rollout.max_errored_fraction=0.5",
        ]
        assert run_train(str(ROOT / "configs/train/criteria_cpu.yaml"), overrides) == 1  # as the CLI runs it
    stopped, restart = capsys.readouterr().err.splitlines()[-2:]
    assert stopped.startswith("train: step 2: 4 of 4 rollouts failed (reward_function: 4)"), stopped
    assert "rollout.max_errored_fraction = 0.5" in stopped
    assert f"judge 'judge' at {judge.base_url}: no verdict after 2 attempt(s): connection: " in stopped
    run = RunFolder(tmp_path / "run")
    last = latest_checkpoint(run)
    assert last is not None and last.name == "step_000001"  # step 1's, whole; step 2 never saved
    assert restart == f"train: the last checkpoint, {last}, is whole; the same command resumes from it"
    assert read_trainer_state(last).step == 1
    from safetensors.torch import load_file

    assert load_file(str(last / "model.safetensors"))  # the weights read back
    assert not list((run.root / "checkpoints").glob("*.tmp"))


class FirstAttemptFaults:
    """A fault for the first request of each distinct verdict: ``slow`` for the first criterion's, invalid
    JSON (``malformed``, then ``truncated``, alternating) for the second's; a repeat of a request is
    answered."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> str | None:
        user = body["messages"][-1]["content"]
        with self.lock:
            self.seen[user] += 1
            if self.seen[user] > 1:
                return None
            if REQUIREMENTS[0] in user:
                return "slow"
            return "malformed" if len(self.seen) % 2 else "truncated"


@pytest.mark.slow
def test_a_slow_judge_and_invalid_json_cost_retries_never_a_silent_unmet(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    with JudgeServer(slow_s=1.0, fault_for=FirstAttemptFaults()) as server:
        cfg = judged_run(
            tmp_path,
            tiny_model_dir,
            server.base_url,
            "max_steps=2",
            "env.judge_timeout_s=0.5",
            requirements=REQUIREMENTS,
        )
        train(cfg)
        faults = Counter(server.fault_log)
    steps = [r for r in metrics(tmp_path / "run") if "reward/mean" in r]
    assert len(steps) == 2
    for step in steps:
        sent = step["judge/calls"] - step["judge/cache_hits"]  # verdicts asked of the server
        assert step["errored_fraction"] == 0.0 and step["judge/failures"] == 0.0
        assert step["judge/retries"] == sent and step["judge/requests"] == 2 * sent  # one retry each
        assert step["judge/faults/timeout"] >= 1 and step["judge/faults/malformed"] >= 1
        # every verdict is the judge's MET: none was made up for a reply it failed to answer
        assert step["criteria/met_fraction"] == 1.0 and step["criteria/rule_judged_fraction"] == 0.0
        assert step["reward/mean"] == 1.0
    assert faults["slow"] >= 2 and faults["malformed"] + faults["truncated"] >= 2 and faults[None] >= 4
