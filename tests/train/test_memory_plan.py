"""The memory plan (``train.memory_plan``, ``train.memory_check``): parameter counts and rows derived by hand
for a small architecture, ZeRO's division, the refusal naming the fields to change, ``rubric-grpo plan``,
the trainer's start, and the estimate against the measured RSS of a training step."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from train.cli import main
from train.config import load_config
from train.memory_check import MemoryPlanError, check_fits, make_setup
from train.memory_plan import LOGIT_BYTES, Setup, estimate, read_shapes

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs/train/tiny_test.yaml"
QWEN_7B = ROOT / "configs/models/qwen2.5-7b-instruct.json"
LORA_7B = ROOT / "configs/train/first_responder_gpu_lora_7b.yaml"

# A small Qwen2: H 64, MLP 128, 2 layers, 4 heads of 16, 2 KV heads, vocabulary 256, tied head.
SMALL = {
    "model_type": "qwen2",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "tie_word_embeddings": True,
}
# embedding 256 * 64 = 16384; per layer: q 64*64 + 64 bias = 4160, k and v 64*32 + 32 = 2080 each,
# o 64*64 = 4096, gate, up, down 64*128 = 8192 each, two norms 128: 37120; 2 layers 74240; final norm 64
SMALL_PARAMETERS = 16384 + 2 * 37120 + 64  # 90688
# r 4 on every linear layer, r * (in + out): q and o 4 * 128 = 512, k and v 4 * 96 = 384, gate, up and
# down 4 * 192 = 768: 4096 per layer
SMALL_ADAPTER = 2 * 4096


@pytest.fixture
def small_config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL))
    return path


def _cfg(*overrides: str):  # the tiny test config, with the model folder a placeholder
    return load_config(TINY, ["env.max_total_tokens=64", "rollout.max_tokens=12", *overrides])


CPU = Setup(device="cpu", device_bytes=None)


def test_shapes_are_counted_from_the_architecture_as_by_hand(small_config: Path) -> None:
    shapes = read_shapes(small_config)
    assert shapes.parameters == SMALL_PARAMETERS
    assert shapes.head_parameters == 256 * 64
    assert len(shapes.linear) == 2 * 7  # the tied head is not among them
    assert (shapes.hidden, shapes.layers, shapes.heads, shapes.kv_heads, shapes.head_dim) == (64, 2, 4, 2, 16)


def test_the_adapter_counted_is_the_one_peft_trains(small_config: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from train.lora import adapt

    cfg = _cfg("model.lora={r: 4}")
    plan = estimate(cfg, read_shapes(small_config), CPU)
    config = AutoConfig.for_model(**SMALL)
    model = adapt(AutoModelForCausalLM.from_config(config).to(torch.float32), cfg.model.lora)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable == SMALL_ADAPTER
    rows = {r.name: r.bytes for r in plan.rows}
    assert rows["optimizer state"] == 2 * 4 * SMALL_ADAPTER  # two float32 moments of the adapter
    assert rows["gradients"] == 4 * SMALL_ADAPTER
    assert rows["weights"] == 4 * SMALL_PARAMETERS + 4 * SMALL_ADAPTER
    assert rows["KL reference"] == 0  # the policy with its adapter off


def test_full_weight_rows_by_hand(small_config: Path) -> None:
    cfg = _cfg("loss.beta=0.04", "optim.micro_batch_size=2")
    rows = {r.name: r.bytes for r in estimate(cfg, read_shapes(small_config), CPU).rows}
    p = SMALL_PARAMETERS
    assert (rows["weights"], rows["gradients"], rows["KL reference"]) == (4 * p, 4 * p, 4 * p)
    assert rows["optimizer state"] == 8 * p and rows["master copy"] == 0
    # 2 x 64 = 128 tokens. Per token and layer, float32: the norms 2 * 2 * 64 * 4 = 1024 bytes; attention
    # 64 + (64 + 2 * 32) + 2 * (64 + 32) + 64 = 448 and MLP 64 + 4 * 128 = 576 elements, 4096 bytes: 5120.
    # 2 layers and one more in the backward: 3 * 5120 * 128
    assert rows["activations"] == 3 * 5120 * 128
    assert rows["logits"] == 128 * 256 * LOGIT_BYTES[4] == 128 * 256 * 12
    # generation: 2 prompts x 4 rollouts at 64 tokens; K and V of 2 layers x 2 heads x 16, float32
    assert rows["KV cache"] == 8 * 64 * 2 * 2 * 2 * 16 * 4


def test_zero_divides_what_it_shards(small_config: Path) -> None:
    shapes, cfg = read_shapes(small_config), _cfg()
    alone = {r.name: r.bytes for r in estimate(cfg, shapes, CPU).rows}
    for stage, weights in ((2, alone["weights"]), (3, alone["weights"] // 2)):
        rows = {r.name: r.bytes for r in estimate(cfg, shapes, Setup("cpu", None, 2, stage)).rows}
        assert rows["weights"] == weights
        assert rows["optimizer state"] == alone["optimizer state"] // 2
        assert rows["gradients"] == alone["gradients"] // 2
        assert rows["master copy"] == 4 * SMALL_PARAMETERS // 2  # DeepSpeed's float32 partition


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
    for field in (*fields, "optim.micro_batch_size"):
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

    from train.memory_check import check_at_start

    plan = check_at_start(_cfg(f"model.name_or_path={tiny_model_dir}"), Accelerator(cpu=True))
    assert plan is not None and plan.fits is True and plan.setup.device == "cpu"
    assert "memory plan per process (1 process" in capsys.readouterr().out


def test_an_architecture_the_plan_cannot_read_is_said_so_and_the_run_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from accelerate import Accelerator

    from train.memory_check import check_at_start

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


@pytest.mark.slow
@pytest.mark.skipif(platform.system() != "Linux", reason="reads VmRSS from /proc")
def test_the_estimate_is_within_30_percent_of_a_measured_step() -> None:
    """The stated tolerance: the RSS one training step adds (``benchmarks/memory_plan_vs_rss.py``: a 4-layer
    Qwen2 of width 256 and vocabulary 16384, 4 sequences of 1024 tokens) is 0.75 to 1.3 times the plan's
    step and AdamW moments, under each of the benchmark's settings: full weights, gradient checkpointing,
    LoRA, bf16 autocast, and the 7B config's bf16 base with LoRA and checkpointing."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/memory_plan_vs_rss.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    settings = json.loads(out.stdout.strip().splitlines()[-1])["settings"]
    assert len(settings) == 5
    for name, result in settings.items():
        assert result["planned_gib"] > 1.0, (name, result)  # a step large enough to measure: over 1 GiB
        assert 0.75 <= result["measured_gib"] / result["planned_gib"] <= 1.3, (name, result)
