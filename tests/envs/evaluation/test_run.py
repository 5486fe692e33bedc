"""The evaluation run writes every rollout, its typed verdicts as plain data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from transformers import AutoTokenizer

from envs.evaluation import run_eval
from envs.multistep_env import MultiStepMultiTurnEnv
from tests.envs.helpers import SCENARIO, reveal_rubric
from tests.support.scripted_backend import ScriptedBackend


async def test_run_eval_writes_every_rollout(tiny_model_dir: Path, tmp_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    env = MultiStepMultiTurnEnv(reveal_rubric(), [SCENARIO], tokenizer)
    backend = ScriptedBackend(
        tokenizer, ["The scene is safe.", "I check vitals.", "Give oxygen, recovery position."]
    )
    summary, rollouts = await run_eval(
        env, backend, env.dataset, n=3, out_path=tmp_path / "r.jsonl", progress=False
    )
    lines = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert len(lines) == len(rollouts) == summary.rollouts == 3
    assert all("sequence" in x and "multistep" in x and "advantage" in x for x in lines)
    # the typed verdicts are written out as plain data, in the order the groups finished
    assert [x["multistep"] for x in lines] == [r.multistep.to_dict() for r in rollouts if r.multistep]
    assert summary.pass_rates["safety"] == (3, 3)
