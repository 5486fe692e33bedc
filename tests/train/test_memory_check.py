"""The memory plan's verdict (``train.memory_check``): a 7B full fine-tune refused naming the fields to
change, ``rubric-grpo plan``, and the trainer's start: the table printed, an unreadable architecture let
through, a model that cannot fit refused before any weight loads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from train.cli import main
from train.config_files import load_config
from train.memory_check import MemoryPlanError, check_at_start, check_fits, make_setup
from train.memory_plan import estimate, read_shapes

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs/train/tiny_test.yaml"
QWEN_7B = ROOT / "configs/models/qwen2.5-7b-instruct.json"
LORA_7B = ROOT / "configs/train/first_responder_gpu_lora_7b.yaml"


def _cfg(*overrides: str):  # the tiny test config, with the model folder a placeholder
    return load_config(TINY, ["env.max_total_tokens=64", "rollout.max_tokens=12", *overrides])


def test_a_7b_full_fine_tune_on_80_gib_is_refused_naming_the_fields() -> None:
    cfg = load_config(ROOT / "configs/train/first_responder_gpu.yaml")  # with its warm start
    shapes = read_shapes(QWEN_7B)
    assert shapes.parameters == 7_615_616_512  # Qwen2.5-7B
    plan = estimate(cfg, shapes, make_setup(cfg, gpu_memory_gib=80))
    # the float32 weights, their gradient and two AdamW moments alone: 16 bytes a parameter, 113 GiB
    assert plan.part("held") + plan.part("step") > 16 * shapes.parameters
    with pytest.raises(MemoryPlanError) as err:
        check_fits(cfg, shapes, plan)
    message = str(err.value)
    fields = ("model.lora", "warm_start.demonstrations: null", "model.gradient_checkpointing", "ZeRO-2")
    for field in fields:
        assert field in message, message
    assert message.count(": fits") == 1


def test_plan_command_prints_the_table_and_exits_1_when_it_does_not_fit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    options = ["--gpu-memory", "80", "--model-config", str(QWEN_7B)]
    assert main(["plan", str(LORA_7B), *options]) == 0
    out = capsys.readouterr().out
    assert "fits: 90% of 80.0 GiB" in out and "sampling copy" in out and "KV cache" in out
    assert main(["plan", str(LORA_7B), "model.lora=null", "model.dtype=float32", *options]) == 1
    captured = capsys.readouterr()
    assert "does NOT fit" in captured.out
    assert captured.err.startswith("rubric-grpo plan: memory plan: the estimated peak")
    assert main(["plan", str(LORA_7B), "--model-config", str(TINY)]) == 2  # not a config.json
    assert "cannot read this architecture" in capsys.readouterr().err


def test_the_trainer_prints_the_plan_before_loading(
    tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from accelerate import Accelerator

    plan = check_at_start(_cfg(f"model.name_or_path={tiny_model_dir}"), Accelerator(cpu=True))
    assert plan is not None and plan.fits is True and plan.setup.device == "cpu"
    assert "memory plan per process (1 process" in capsys.readouterr().out


def test_an_architecture_the_plan_cannot_read_is_said_so_and_the_run_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from accelerate import Accelerator

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2, "vocab_size": 64}))
    with pytest.raises(ValueError, match="cannot read this architecture"):  # GPT-2: no intermediate_size
        read_shapes(tmp_path / "config.json")
    assert check_at_start(_cfg(f"model.name_or_path={tmp_path}"), Accelerator(cpu=True)) is None
    assert capsys.readouterr().out.startswith("memory plan: none: ")


def test_the_trainer_refuses_a_model_that_cannot_fit_before_loading_it(tmp_path: Path) -> None:
    """A folder with a config.json and no weights at all: Qwen2.5-7B's shape with 20 times its layers (150B
    parameters, beyond any host's memory in float32 with AdamW); the run stops at the plan, with exit 2."""
    folder = tmp_path / "qwen-150b-shape"
    folder.mkdir()
    config = json.loads(QWEN_7B.read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 20 * 28}))
    overrides = [f"model.name_or_path={folder}", f"logging.output_dir={tmp_path / 'run'}"]
    out = subprocess.run(
        [sys.executable, "-m", "train", str(TINY), *overrides, "logging.wandb_mode=disabled"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert "train: memory plan: the estimated peak" in out.stderr
    assert "model.lora: {}" in out.stderr
    assert "does NOT fit" in out.stdout


def test_with_vllm_the_plan_says_what_a_server_on_the_same_gpu_may_take(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The GPU vLLM config (float32 weights, bf16 autocast, beta 0, 8 x 2048 tokens a micro-batch) on a
    one-layer Llama of width 1000, one head, MLP 8, vocabulary 1000. Parameters: embedding and head 2e6,
    q k v o 4e6, MLP 24000, norms 3000: 6,027,000. Held: float32 weights and two moments, 12 bytes each,
    72,324,000. Step: gradients 24,108,000; bf16 copies of the linear weights 2 * 5,024,000 = 10,048,000;
    activations per token and layer 16000 (norms) + 2 * (9000 + 1032 + 3000) = 42064, for 2 layers (1 and
    1 in the backward) of 16384 tokens: 1,378,353,152; logits 16384 * 1000 * 4 = 65,536,000. Peak
    1,550,369,152 bytes = 1.444 GiB, so a server may take 0.90 - 1.444 / 80 = 0.8820 of the GPU."""
    config = {
        "model_type": "llama",
        "hidden_size": 1000,
        "intermediate_size": 8,
        "num_hidden_layers": 1,
        "num_attention_heads": 1,
        "vocab_size": 1000,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    vllm = ROOT / "configs/train/first_responder_gpu_vllm.yaml"
    assert (
        main(["plan", str(vllm), "--gpu-memory", "80", "--model-config", str(tmp_path / "config.json")]) == 0
    )
    out = capsys.readouterr().out
    assert "KV cache                                    0.00 GiB  on the vLLM servers" in out
    assert [line.split()[-2] for line in out.splitlines() if line.startswith("  peak")] == ["1.44"]
    assert "a vLLM server on the same GPU: --gpu-memory-utilization 0.88 at most" in out
