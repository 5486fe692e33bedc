"""LoRA under DeepSpeed ZeRO-2 and ZeRO-3: real ``accelerate launch`` runs with two CPU processes over gloo,
as the full-weight launches of ``test_distributed.py``.

Under both stages only the adapter is in the ZeRO optimiser, the KL reference is the policy with its adapter
off, the engine's checkpoint files hold the adapter but not the frozen base weights, a resume from the
step-2 checkpoint makes step 3 bit for bit, and the final ``model/`` is the merged model, gathered from the
shards under ZeRO-3 (where the driver shards every parameter: the tiny model's are all small enough for
ZeRO-3 to keep whole by default, and the merged ``model/`` then came out right without a gather). ZeRO-3 runs through ``tests/support/lora_deepspeed_driver.py`` (the trainer's own
``load_policy``, ``train_step`` and checkpoints, no rollouts): a LoRA run has no ZeRO-3 rollout backend
yet. ZeRO-2 also runs the whole trainer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train.test_distributed import REPO_ROOT, TIMEOUT_S, _check_run, _free_port, _launch

torch = pytest.importorskip("torch")
pytest.importorskip("deepspeed")
pytest.importorskip("peft")

LINEARS_PER_LAYER = 7  # q k v o gate up down: the tiny Qwen2's linear layers, the head left out
SCALE = 32 / 16  # the default model.lora: alpha 32 over r 16


def _drive(stage: int, model_dir: Path, out: Path, phase: str) -> None:
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", f"configs/accelerate/deepspeed_zero{stage}.yaml", "--main_process_port", str(_free_port()),
        "tests/support/lora_deepspeed_driver.py", str(model_dir), str(out), phase,
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    env.update(
        WANDB_MODE="offline", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(REPO_ROOT)
    )
    proc = subprocess.run(
        cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert proc.returncode == 0, (
        f"{phase}: exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    )


def _base_weights_in_engine_files(checkpoint: Path) -> set[str]:
    """The names of base weights in the DeepSpeed engine's model-state files of ``checkpoint``, the adapter's
    left out. DeepSpeed drops frozen parameters by their ``named_parameters`` name, and a tied output head
    is not one (it is the input embedding's), so the tiny model's tied head stays under its own name."""
    keys: set[str] = set()
    for path in (checkpoint / "pytorch_model").glob("*model_states.pt"):
        state = torch.load(path, map_location="cpu", weights_only=False)
        assert any(".lora_" in k for k in state["module"]), f"{path} holds no adapter"
        keys |= set(state["module"]) | set(state.get("frozen_param_fragments") or {})
    return {k for k in keys if ".lora_" not in k} - {"base_model.model.lm_head.weight"}


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_lora_trains_checkpoints_and_resumes_under_zero(
    stage: int, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from safetensors.torch import load_file

    out = tmp_path / f"zero{stage}"
    _drive(stage, tiny_model_dir, out, "train")
    _drive(stage, tiny_model_dir, out, "resume")

    layers = json.loads((tiny_model_dir / "config.json").read_text())["num_hidden_layers"]
    trained = load_file(str(out / "train_adapter.safetensors"))
    assert len(trained) == 2 * LINEARS_PER_LAYER * layers  # lora_A and lora_B of each linear layer
    assert json.loads((out / "train_optimised.json").read_text()) == sorted(trained)
    assert any(t.abs().max() > 0 for n, t in trained.items() if ".lora_B." in n)  # B starts at 0: it trained

    resumed = load_file(str(out / "resume_adapter.safetensors"))
    assert resumed.keys() == trained.keys()
    assert all(torch.equal(resumed[n], trained[n]) for n in trained), "the resumed step 3 differs"

    final = out / "final" / "checkpoints" / "step_000003"
    assert not _base_weights_in_engine_files(final)
    saved = load_file(str(final / "adapter" / "adapter_model.safetensors"))  # peft's names: no ".default"
    assert {n.replace(".default.", ".") for n in trained} == saved.keys()
    assert all(torch.equal(saved[n.replace(".default.", ".")], t) for n, t in trained.items())

    base = load_file(str(tiny_model_dir / "model.safetensors"))
    merged = load_file(str(final / "model" / "model.safetensors"))
    q = "model.layers.0.self_attn.q_proj"
    a_RI = trained[f"base_model.model.{q}.lora_A.default.weight"]  # [r, in]
    b_OR = trained[f"base_model.model.{q}.lora_B.default.weight"]  # [out, r]
    torch.testing.assert_close(merged[f"{q}.weight"], base[f"{q}.weight"] + b_OR @ a_RI * SCALE)
    norm = "model.layers.0.input_layernorm.weight"
    assert torch.equal(merged[norm], base[norm])  # not adapted: as loaded


@pytest.mark.slow
def test_a_lora_run_under_deepspeed_zero2(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The whole trainer with LoRA under ZeRO-2: rollouts from the local backend, two steps, checkpoints
    with the adapter and without the base weights, the merged ``model/`` at the end."""
    out = tmp_path / "zero2-lora"
    proc = _launch("deepspeed_zero2.yaml", tiny_model_dir, out, "model.lora={}", "loss.beta=0.1")
    _check_run(proc, tiny_model_dir, out)  # two steps, finite loss, the merged model/ moved
    final = out / "checkpoints" / "step_000002"
    assert (final / "adapter" / "adapter_model.safetensors").is_file()
    assert not _base_weights_in_engine_files(final)
