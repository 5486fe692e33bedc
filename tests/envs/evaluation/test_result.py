"""An evaluation's result: the typed object it returns is the one its files read back as; bad files are named."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from transformers import AutoTokenizer

from envs.evaluation import EvalFolder, EvalSummary, evaluate_to_dir, read_evaluation
from envs.multistep_env import MultiStepMultiTurnEnv
from tests.envs.helpers import SCENARIO, reveal_rubric
from tests.support.rollouts import scored
from tests.support.scripted_backend import ScriptedBackend


async def test_the_files_read_back_as_the_result(tiny_model_dir: Path, tmp_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    env = MultiStepMultiTurnEnv(reveal_rubric(), [SCENARIO], tokenizer)
    backend = ScriptedBackend(tokenizer, ["The scene is safe.", "I check vitals.", "Give oxygen."])
    folder = EvalFolder(tmp_path / "eval_before")
    result = await evaluate_to_dir(env, backend, env.dataset, 2, folder, seed=0)
    assert folder.rollouts.is_file() and folder.plot.is_file()
    assert json.loads(folder.summary.read_text()) == json.loads(json.dumps(result.as_dict()))
    # two rollouts of one scenario; the first reply passes "safety" in both
    assert result.summary.rollouts == len(result.rollouts) == 2 and result.summary.examples == 1
    assert result.summary.pass_rates["safety"] == (2, 2)
    back = read_evaluation(folder)
    # the same numbers (NaN included: one scenario has no interval) and the same typed rollouts
    assert json.dumps(back.as_dict()) == json.dumps(result.as_dict()) and back.metrics == result.metrics == {}
    assert back.rollouts == result.rollouts and back.rollouts[0].multistep is not None


def _summary(**fields: object) -> dict[str, object]:
    return {**EvalSummary(rollouts=2, examples=1, pass_rates={"a": (1, 2)}, depth={1: 2}).as_dict(), **fields}


def test_a_summary_reads_back_with_the_environment_numbers(tmp_path: Path) -> None:
    folder = EvalFolder(tmp_path)
    folder.summary.write_text(json.dumps(_summary(**{"healthbench/overall": 0.25, "job": {"n": 2}})))
    rollouts = [scored(scenario="a", reward=0.5), scored(scenario="a", reward=1.0)]
    folder.rollouts.write_text("\n\n".join(json.dumps(r.to_dict()) for r in rollouts) + "\n")
    result = read_evaluation(folder)
    assert result.summary.pass_rates == {"a": (1, 2)} and result.summary.depth == {1: 2}
    assert math.isnan(result.summary.reward_mean)  # NaN is written as NaN and read back as NaN
    assert result.metrics == {"healthbench/overall": 0.25}  # the eval job's settings are not a number
    assert result.rollouts == rollouts


def test_a_bad_folder_is_named(tmp_path: Path) -> None:
    folder = EvalFolder(tmp_path)
    with pytest.raises(FileNotFoundError):
        read_evaluation(folder)
    summary = _summary()
    del summary["completion_tokens"]
    folder.summary.write_text(json.dumps(summary))
    with pytest.raises(ValueError, match=r"summary.json: field 'completion_tokens' is missing"):
        read_evaluation(folder)
    folder.summary.write_text(json.dumps(_summary(pass_rates={"a": [1, 2]})))
    with pytest.raises(ValueError, match=r"summary.json: does not read as an evaluation summary"):
        read_evaluation(folder)
    folder.summary.write_text(json.dumps(_summary()))
    good = json.dumps(scored().to_dict())
    folder.rollouts.write_text(good + '\n{"reward": \n')
    with pytest.raises(ValueError, match=r"rollouts.jsonl: line 2: not JSON"):
        read_evaluation(folder)
    folder.rollouts.write_text(good + '\n{"reward": 0.5}\n')
    with pytest.raises(ValueError, match=r"rollouts.jsonl: line 2: field 'prompt' is missing"):
        read_evaluation(folder)
    folder.rollouts.write_text(good.replace('"turn"', '"turns"') + "\n")
    with pytest.raises(
        ValueError, match=r"rollouts.jsonl: line 1: field 'turns' is not one of a scored rollout"
    ):
        read_evaluation(folder)
    folder.rollouts.write_text(good[:-1] + ', "multistep": {"results": [{"name": "x"}]}}\n')
    with pytest.raises(ValueError, match=r"rollouts.jsonl: line 1: does not read as a scored rollout"):
        read_evaluation(folder)
