"""Rubric scaffolding (``env.scaffold``): the schedule decays, training prompts carry the positive criteria
at the share the schedule and the group position give, never a pitfall, the reward still grades every
criterion, held-out evaluation never sees a hint, and a resumed run shows what the uninterrupted one would."""

from __future__ import annotations

import asyncio
import itertools
import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

pytest.importorskip("transformers")
pytest.importorskip("torch")  # the orchestrator seeds torch's sampling per step

from transformers import AutoTokenizer

from envs.backends.base import SamplingParams
from envs.config import EnvConfig, ScaffoldConfig
from envs.criteria import scaffold as scaffolding
from envs.criteria.environment import HINTS_KEY, CriteriaEnv
from envs.environment import TrainingStep
from envs.evaluation.run import run_eval
from envs.examples import Example
from rubrics.criteria.autograders.mixed import RuleFirstGrader
from rubrics.criteria.example import CriteriaExample
from tests.support.rollouts import with_advantages
from tests.support.scripted_backend import ScriptedBackend
from train.config import AdvantageConfig
from train.orchestrator import Orchestrator

REPLY = "Hold it under cool water, then put butter on it."  # meets "cool" and the pitfall "butter"


def _burn(i: int) -> CriteriaExample:
    return CriteriaExample.model_validate(
        {
            "id": f"burn-{i}",
            "prompt": f"My son burned his hand on the stove ({i}). What do I do?",
            "criteria": [
                {"name": "cool", "weight": 4, "requirement": "Cool the burn under running water",
                 "rule": {"any": ["cool water", "running water"]}},
                {"name": "cover", "weight": 2, "requirement": "Cover it loosely with cling film",
                 "rule": {"any": ["cling film", "cover"]}},
                {"name": "doctor", "weight": 2, "requirement": "See a doctor if it blisters",
                 "rule": {"any": ["doctor", "clinic"]}},
                {"name": "calm", "weight": 1, "requirement": "Keep the child calm",
                 "rule": {"any": ["calm"]}},
                {"name": "butter", "weight": -3, "requirement": "Suggests butter or ice",
                 "rule": {"any": ["butter", "ice"]}},
            ],
        }
    )  # fmt: skip


BURNS = [_burn(i) for i in range(3)]
POSITIVE = {c.requirement for c in BURNS[0].criteria if c.weight > 0}
PITFALL = "Suggests butter or ice"


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> Any:
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _env(tokenizer: Any, scaffold: ScaffoldConfig | None) -> CriteriaEnv:
    return CriteriaEnv(
        BURNS, RuleFirstGrader(), tokenizer, sampling=SamplingParams(max_tokens=32), scaffold=scaffold
    )


def _user_text(rollout: Any) -> str:
    return str(next(m["content"] for m in rollout.prompt if m["role"] == "user"))


@pytest.mark.parametrize("schedule", ["sigmoid", "linear"])
def test_the_share_decays_from_start_to_end(schedule: str) -> None:
    cfg = ScaffoldConfig(share_start=0.8, share_end=0.2, schedule=schedule)
    shares = [scaffolding.scheduled_share(cfg, step, 16) for step in range(16)]
    assert shares[0] == pytest.approx(0.8) and shares[-1] == pytest.approx(0.2)
    assert all(a >= b for a, b in itertools.pairwise(shares))
    assert shares[3] > shares[12]
    half = ScaffoldConfig(share_start=1.0, schedule=schedule, decay_fraction=0.5)
    late = [scaffolding.scheduled_share(half, step, 21) for step in range(10, 21)]
    assert late == pytest.approx([0.0] * 11)  # over at step 0.5 * 20 and flat after
    if schedule == "linear":
        assert scaffolding.scheduled_share(half, 5, 21) == pytest.approx(0.5)


def test_the_sigmoid_holds_early_and_falls_late_against_the_line() -> None:
    sigmoid, linear = ScaffoldConfig(schedule="sigmoid"), ScaffoldConfig(schedule="linear")
    assert scaffolding.scheduled_share(sigmoid, 2, 21) > scaffolding.scheduled_share(linear, 2, 21)
    assert scaffolding.scheduled_share(sigmoid, 18, 21) < scaffolding.scheduled_share(linear, 18, 21)
    assert scaffolding.scheduled_share(sigmoid, 10, 21) == pytest.approx(0.5)


@pytest.mark.parametrize(
    "fields",
    [{"share_start": 1.5}, {"share_end": -0.1}, {"share_start": math.nan}, {"share_start": math.inf},
     {"share_start": 0.3, "share_end": 0.5}, {"decay_fraction": 0.0}, {"schedule": "cosine"}],
)  # fmt: skip
def test_bad_scaffold_settings_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ScaffoldConfig(**fields)


def test_only_a_criteria_environment_is_scaffolded() -> None:
    assert EnvConfig(type="criteria", data="x.jsonl").scaffold is None  # off unless the block is there
    with pytest.raises(ValidationError, match=r"env\.scaffold"):
        EnvConfig(scaffold=ScaffoldConfig())


async def test_graded_hints_in_training_prompts_and_the_share_logged(tokenizer: Any) -> None:
    env = _env(tokenizer, ScaffoldConfig(share_start=1.0, per_rollout="graded"))
    backend = ScriptedBackend(tokenizer, [REPLY])
    group = await env.run_group(Example(criteria=BURNS[0]), backend, 8, TrainingStep(3, 0, 16))
    counts = [len(r.info[HINTS_KEY]) for r in group]
    assert counts == [0, 1, 1, 2, 2, 3, 3, 4]  # round(4 * i / 7), halves up
    for rollout, count in zip(group, counts, strict=True):
        text = _user_text(rollout)
        shown = {req for req in POSITIVE if f"- {req}" in text}
        assert len(shown) == count and PITFALL not in text
        assert (scaffolding.HINT_HEADER in text) == (count > 0)
        # the loss trains on the prompt the reply was sampled from: the hints are in its token ids
        prompt_text = tokenizer.decode(rollout.trajectory[0]["prompt_ids"])
        assert all(req in prompt_text for req in shown)
    assert len(backend.prompts) == len({tuple(r.info[HINTS_KEY]) for r in group})  # one request a hint set
    metrics = env.step_metrics(with_advantages(group))
    assert metrics["scaffold/share_shown"] == pytest.approx(sum(counts) / (4 * 8))
    assert metrics["scaffold/share_scheduled"] == pytest.approx(0.5)  # the mean of i / 7


async def test_same_share_for_every_rollout_and_none_once_decayed(tokenizer: Any) -> None:
    env = _env(tokenizer, ScaffoldConfig(share_start=0.5, per_rollout="same"))
    backend = ScriptedBackend(tokenizer, [REPLY])
    first = await env.run_group(Example(criteria=BURNS[1]), backend, 4, TrainingStep(0, 0, 8))
    assert [len(r.info[HINTS_KEY]) for r in first] == [2, 2, 2, 2]
    assert env.step_metrics(with_advantages(first))["scaffold/share_shown"] == pytest.approx(0.5)
    before = len(backend.prompts)
    last = await env.run_group(Example(criteria=BURNS[1]), backend, 4, TrainingStep(0, 7, 8))
    assert all(scaffolding.HINT_HEADER not in _user_text(r) for r in last)
    assert len(backend.prompts) == before + 1  # the same plain prompt: one request for the group
    assert env.step_metrics(with_advantages(last))["scaffold/share_shown"] == 0.0


async def test_the_reward_grades_every_criterion_not_only_the_hints(tokenizer: Any) -> None:
    backend = ScriptedBackend(tokenizer, [REPLY])
    plain = await _env(tokenizer, None).run_group(Example(criteria=BURNS[0]), backend, 1)
    env = _env(tokenizer, ScaffoldConfig(share_start=1.0, per_rollout="graded"))
    group = await env.run_group(Example(criteria=BURNS[0]), backend, 8, TrainingStep(1, 0, 16))
    for rollout in group:
        assert rollout.criteria is not None
        assert [v.name for v in rollout.criteria.verdicts] == ["cool", "cover", "doctor", "calm", "butter"]
        assert rollout.reward == pytest.approx(plain[0].reward) == pytest.approx((4 - 3) / 9)


async def test_held_out_evaluation_never_shows_hints(tokenizer: Any) -> None:
    env = _env(tokenizer, ScaffoldConfig(share_start=1.0, share_end=1.0, per_rollout="same"))
    backend = ScriptedBackend(tokenizer, [REPLY])
    _, rollouts = await run_eval(env, backend, [Example(criteria=e) for e in BURNS], 4, progress=False)
    assert len(rollouts) == 12
    assert all(scaffolding.HINT_HEADER not in _user_text(r) and HINTS_KEY not in r.info for r in rollouts)
    texts = [tokenizer.decode(ids) for ids in backend.prompts]
    assert texts and all(scaffolding.HINT_HEADER not in t for t in texts)
    assert env.step_metrics(rollouts)["scaffold/share_shown"] == 0.0


def _orchestrator(tokenizer: Any, cursor: dict[str, Any] | None = None) -> Orchestrator:
    env = _env(tokenizer, ScaffoldConfig(share_start=1.0, schedule="linear"))
    examples = [Example(criteria=e) for e in BURNS]
    backend = ScriptedBackend(tokenizer, [REPLY])
    advantage = AdvantageConfig()
    return Orchestrator(env, backend, examples, 2, 4, advantage, seed=5, cursor=cursor, max_steps=6)


def _hints_of(orch: Orchestrator, step: int) -> list[tuple[str, list[str]]]:
    rollouts = asyncio.run(orch.produce(step, policy_version=step)).all_rollouts
    return [(r.scenario, r.info[HINTS_KEY]) for r in rollouts]


def test_a_resumed_run_shows_the_hints_of_the_uninterrupted_one(tokenizer: Any) -> None:
    uninterrupted = _orchestrator(tokenizer)
    want = [_hints_of(uninterrupted, step) for step in range(4)]
    first = _orchestrator(tokenizer)
    for step in range(2):
        _hints_of(first, step)
    resumed = _orchestrator(tokenizer, cursor=first.cursor.state())  # what a checkpoint of step 1 holds
    assert [_hints_of(resumed, step) for step in (2, 3)] == want[2:]
    shown = [sum(len(h) for _, h in hints) for hints in want]
    assert shown[0] > shown[3] > 0  # it decays, and step 3 of 6 still shows some
