"""The overfit check on the flagship, at its smallest setting that still shows the rise: SmolLM2-135M, the
main job's one-epoch warm start, then 5 guided GRPO steps on two training scenarios (one safe scene, one
unsafe), float32 everywhere so every CPU computes the same thing. The greedy reward on exactly those two
scenarios must rise well above the warm start's, every update must move the logprobs the way the advantages
ask, and the tokens that carry the loss must be the model's replies and nothing else.
(``benchmarks/overfit.py``; the measured curves: docs/results.md, The overfit check.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_guided_grpo_raises_the_greedy_reward_on_the_scenarios_it_trains_on(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    command = [
        *(sys.executable, "benchmarks/overfit.py", "--examples", "2", "--steps", "5", "--eval-every", "5"),
        *("--out", str(tmp_path)),
        *("rollout.guide=true", "model.mixed_precision=no", "rollout.inference_dtype=null"),
    ]
    env = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=1700)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    curve = {point: e["reward_mean"] for point, e in result["train_eval"].items()}
    assert curve["before"] == 0.0  # the untrained model earns nothing here: the warm start is needed
    assert curve["after"] > curve["warm_start"] + 0.2, curve
    assert result["trivial_policies"]["majority"] < curve["after"], result["trivial_policies"]
    trained = [s for s in result["per_step"] if "train/update/right_direction_frac" in s]
    assert trained and all(
        s["train/update/logp_delta_pos"] > 0 > s["train/update/logp_delta_neg"] for s in trained
    )
    # the loss: only what the model sampled, every reply whole with its end-of-turn token, no revealed text
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "run" / "warm_start")
    for line in (tmp_path / "run" / "eval_after_train" / "rollouts.jsonl").read_text().splitlines():
        rollout = json.loads(line)
        sequence = rollout["sequence"]
        for (start, end), reply in zip(sequence["replies"], rollout["completion"][::2], strict=True):
            assert all(sequence["loss_mask"][start:end]) and reply["role"] == "assistant"
            assert tokenizer.decode(sequence["ids"][start:end]) == reply["content"] + "<|im_end|>"
        assert sum(sequence["loss_mask"]) == sum(end - start for start, end in sequence["replies"])
