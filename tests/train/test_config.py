"""Run configs: every file in configs/train loads, bad values name the file and the field, and the models
import without torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from train.config import TrainConfig
from train.config_files import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs/train").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_run_config_loads(path: Path) -> None:
    cfg = load_config(path)
    assert isinstance(cfg, TrainConfig)


def test_main_job_config_is_the_cpu_first_responder_run() -> None:
    cfg = load_config(ROOT / "configs/train/first_responder_cpu.yaml")
    assert cfg.model.name_or_path == "smollm2" and cfg.rollout.backend == "local"
    assert cfg.env.judge == "rules" and cfg.env.rubric.endswith("first_responder.yaml")
    readme = (ROOT / "README.md").read_text()
    assert ".venv/bin/python -m train configs/train/first_responder_cpu.yaml" in readme


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["loss.epsilon=1.5"], "loss.epsilon: Input should be less than 1"),
        (["loss.typo=1"], "loss.typo: Extra inputs are not permitted"),
        (["rollout.backend=vllm"], "rollout.vllm_urls: backend 'vllm' needs at least one server URL"),
        (["optim.learning_rate=.nan"], "optim.learning_rate"),
        (["optim.micro_batch_size=64"], "optim.micro_batch_size (64) exceeds the sequences per step"),
        (["rollout.max_tokens=2000"], "loss.max_completion_length must be at least rollout.max_tokens"),
        (["env.type=single_turn"], "env.data: a single_turn environment needs a JSONL of prompts"),
        (
            ["rollout.backend=vllm", "rollout.vllm_urls=[http://x]", "rollout.inference_dtype=bfloat16"],
            "rollout.inference_dtype: only for backend 'local'",
        ),
        (
            ["model.mixed_precision=bf8"],
            "model.mixed_precision: Input should be 'no', 'bf16', 'fp16' or 'auto'",
        ),
        (["advantage.credit=reply"], "advantage.credit: Input should be 'episode', 'turn' or 'mixed'"),
        (["nonsense"], "expected key.path=value"),
    ],
)
def test_invalid_configs_name_the_field(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(ROOT / "configs/train/first_responder_cpu.yaml", overrides)
    assert message in str(err.value)
    if overrides != ["nonsense"]:
        assert str(err.value).startswith(str(ROOT / "configs/train/first_responder_cpu.yaml"))


def test_credit_per_reply_needs_a_requirement_dag() -> None:
    assert load_config(ROOT / "configs/train/first_responder_cpu.yaml", ["advantage.credit=turn"])
    for credit in ("turn", "mixed"):
        with pytest.raises(
            ConfigError, match=rf"advantage\.credit: '{credit}' credits each reply by the requir"
        ):
            load_config(ROOT / "configs/train/criteria_cpu.yaml", [f"advantage.credit={credit}"])
    assert load_config(ROOT / "configs/train/first_responder_cpu.yaml", ["advantage.credit=mixed"])
    with pytest.raises(ConfigError, match=r"advantage: .*node_weight: only 'mixed' credit reads it"):
        load_config(ROOT / "configs/train/first_responder_cpu.yaml", ["advantage.node_weight=0.5"])
    # a dumped config (a run's saved config.yaml, the memory plan's variants) carries the default: valid again
    cfg = load_config(ROOT / "configs/train/first_responder_cpu.yaml")
    assert TrainConfig.model_validate(cfg.model_dump()).advantage == cfg.advantage


def test_invalid_config_fails_before_any_model_loads(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout: {group_size: 1}\n")
    code = "import sys; from train.__main__ import main; rc = main(sys.argv[1:]); print('TORCH', 'torch' in sys.modules); sys.exit(rc)"
    out = subprocess.run([sys.executable, "-c", code, str(bad)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2
    assert f"{bad}: rollout.group_size: Input should be greater than or equal to 2" in out.stderr
    assert "TORCH False" in out.stdout


def test_config_models_and_their_reader_import_without_torch() -> None:
    code = "import sys, train.config, train.config_files; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_auto_mixed_precision_follows_the_hardware(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` takes bf16 only where it is computed natively: an emulated bf16 step is many times slower."""
    import train.distributed as distributed

    assert distributed.resolve_mixed_precision("no") == "no"
    assert distributed.resolve_mixed_precision("bf16") == "bf16"
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    for native, want in ((True, "bf16"), (False, "no")):
        monkeypatch.setattr(distributed, "cpu_has_native_bf16", lambda native=native: native)
        assert distributed.resolve_mixed_precision("auto") == want


def test_auto_inference_dtype_samples_bf16_only_where_it_is_native(monkeypatch: pytest.MonkeyPatch) -> None:
    import train.distributed as distributed

    assert distributed.resolve_inference_dtype(None) is None
    assert distributed.resolve_inference_dtype("bfloat16") == "bfloat16"
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    for native, want in ((True, "bfloat16"), (False, None)):
        monkeypatch.setattr(distributed, "cpu_has_native_bf16", lambda native=native: native)
        assert distributed.resolve_inference_dtype("auto") == want
