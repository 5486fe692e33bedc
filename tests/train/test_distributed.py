"""Real ``accelerate launch`` runs of the trainer with two CPU processes: DeepSpeed ZeRO-2 over gloo, DDP,
ZeRO-3 with rollouts from a real vLLM server (weights gathered from the shards and pushed after every step),
and DDP and ZeRO-3 with a LoRA adapter, alone sent to a real vLLM server after every step.

Each run trains the tiny model for two steps on the toy task and must finish with both steps logged, a
finite loss, a final checkpoint and weights that moved. The first ZeRO-2 run on a machine JIT-compiles
DeepSpeed's shared-memory comm op (about a minute, cached in ~/.cache/torch_extensions afterwards).
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train.runs import SMALL_RUN

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")
pytest.importorskip("transformers")

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 600


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_env() -> dict[str, str]:
    """The environment of a launched run: offline, and without the parent's wandb service (each run starts
    its own)."""
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    env.update(WANDB_MODE="offline", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def _launch(
    accelerate_config: str,
    model_dir: Path,
    out: Path,
    *overrides: str,
    config: str = "configs/train/tiny_test.yaml",
) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        f"configs/accelerate/{accelerate_config}",
        "--main_process_port",
        str(_free_port()),  # the config's fixed port may be taken by a parallel run
        "-m",
        "train",
        config,
        f"model.name_or_path={model_dir}",
        f"logging.output_dir={out}",
        *overrides,
    ]
    return subprocess.run(
        cmd, cwd=REPO_ROOT, env=launch_env(), capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )


def _lora_through_vllm(server_url: str) -> tuple[str, ...]:
    """A LoRA run (r = 16 on every linear layer) that samples from the vLLM server at ``server_url`` and, after
    each sync, checks the server's greedy tokens against the trainer's."""
    return (
        "model.lora={}",
        "rollout.backend=vllm",
        f"rollout.vllm_urls=[{server_url}]",
        "rollout.check_sync=true",
    )


def _check_run(proc: subprocess.CompletedProcess[str], model_dir: Path, out: Path) -> list[dict[str, float]]:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "train/loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for row in steps:
        assert math.isfinite(row["train/loss"])
        assert math.isfinite(row["train/grad_norm"]) and row["train/grad_norm"] > 0

    final = out / "checkpoints" / "step_000002"
    assert (final / "trainer_state.json").is_file()
    assert json.loads((final / "trainer_state.json").read_text())["step"] == 2
    assert (out / "checkpoints" / "latest").read_text().strip() == "step_000002"

    from safetensors.torch import load_file

    before = load_file(str(model_dir / "model.safetensors"))
    after = load_file(str(final / "model" / "model.safetensors"))
    common = before.keys() & after.keys()
    assert common, "the exported model shares no tensor names with the initial one"
    moved = max((after[k].float() - before[k].float()).abs().max().item() for k in common)
    assert moved > 0, "training did not change the weights"
    return steps


@pytest.mark.slow
def test_two_steps_under_deepspeed_zero2_with_two_cpu_processes(tiny_model_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    out = tmp_path / "zero2"
    proc = _launch("deepspeed_zero2.yaml", tiny_model_dir, out)
    _check_run(proc, tiny_model_dir, out)
    final = out / "checkpoints" / "step_000002"
    # DeepSpeed really ran (not a silent fallback to DDP): its own sharded files, one optimiser shard per process
    shards = sorted(p.name for p in (final / "pytorch_model").glob("zero_pp_rank_*_optim_states.pt"))
    assert len(shards) == 2, shards
    assert sorted(p.name for p in final.glob("random_states_*.pkl")) == [
        "random_states_0.pkl",
        "random_states_1.pkl",
    ]


@pytest.mark.slow
def test_two_steps_ddp_with_two_cpu_processes(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    proc = _launch("multi_process.yaml", tiny_model_dir, out)
    _check_run(proc, tiny_model_dir, out)
    final = out / "checkpoints" / "step_000002"
    assert sorted(p.name for p in final.glob("random_states_*.pkl")) == [
        "random_states_0.pkl",
        "random_states_1.pkl",
    ]
    assert (final / "optimizer.bin").is_file()


@pytest.mark.slow
@pytest.mark.vllm
def test_two_steps_under_zero3_each_process_with_its_colocated_engine(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Two CPU processes under ZeRO-3, each sampling its share with its own colocated vLLM engine: each
    gathers the sharded weights module by module into its engine, and checks it after every load."""
    pytest.importorskip("deepspeed")
    from tests.support.vllm_fixtures import vllm_in_process_or_skip

    vllm_in_process_or_skip()
    out = tmp_path / "zero3-colocate"
    proc = _launch(
        "deepspeed_zero3.yaml",
        tiny_model_dir,
        out,
        "rollout.backend=vllm_colocate",
        "rollout.check_sync=true",
    )
    steps = _check_run(proc, tiny_model_dir, out)  # check_sync raised in the run if an engine lagged
    full = (tiny_model_dir / "model.safetensors").stat().st_size
    assert all(0 < full - r["sync/bytes"] < 8192 for r in steps)  # every weight, gathered (a header aside)


@pytest.mark.slow
@pytest.mark.vllm
def test_two_steps_under_zero3_with_a_vllm_server(
    restore_weights, tiny_model_dir: Path, tmp_path: Path
) -> None:
    pytest.importorskip("deepspeed")
    import httpx

    server = restore_weights
    out = tmp_path / "zero3"
    overrides = ("rollout.backend=vllm", f"rollout.vllm_urls=[{server.base_url}]", "rollout.check_sync=true")
    proc = _launch("deepspeed_zero3.yaml", tiny_model_dir, out, *overrides)
    steps = _check_run(proc, tiny_model_dir, out)  # check_sync raised in the run if the server lagged
    assert all(r["time/sync_s"] > 0 for r in steps)
    assert httpx.get(f"{server.base_url}/weight_info", timeout=10).json()["weight_version"] == "step-2"


def test_local_backend_is_refused_under_zero3(tiny_model_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    proc = _launch("deepspeed_zero3.yaml", tiny_model_dir, tmp_path / "refused")
    assert proc.returncode != 0
    assert "rollout.backend: 'local' cannot generate under DeepSpeed ZeRO-3" in proc.stderr


@pytest.mark.slow
def test_a_criteria_run_under_ddp_with_two_cpu_processes(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Per-prompt criteria under a real ``accelerate launch``: each process plays its share of the prompts,
    the main one evaluates and reports with the criteria's own sections."""
    from tests.train.test_criteria_run import rule_only_split

    train_file, held_file = rule_only_split(tmp_path)
    out = tmp_path / "criteria"
    overrides = (
        f"env.data={train_file}",
        f"env.eval_data={held_file}",
        "max_steps=2",
        *SMALL_RUN,
        "rollout.prompts_per_step=1",
        "logging.eval_every=0",
    )
    proc = _launch(
        "multi_process.yaml", tiny_model_dir, out, *overrides, config="configs/train/criteria_cpu.yaml"
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "reward/mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["criteria/rule_judged_fraction"] == 1.0 for r in steps)
    assert "## Held-out by tag: trained" in (out / "report.md").read_text()


@pytest.mark.slow
@pytest.mark.vllm
def test_two_lora_steps_ddp_with_a_vllm_server(
    lora_vllm_server, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Both processes generate through the adapter the main one loaded (the other one names it, pushing
    nothing); the main process checks the server's greedy tokens against its adapted policy."""
    import httpx

    server = lora_vllm_server
    out = tmp_path / "ddp_lora"
    proc = _launch("multi_process.yaml", tiny_model_dir, out, *_lora_through_vllm(server.base_url))
    steps = _check_run(proc, tiny_model_dir, out)  # the final model/ is the merged one, moved from the base
    assert all(r["sync/bytes"] > 0 for r in steps)
    assert all(abs(r["train/is/ratio_mean"] - 1.0) < 0.05 for r in steps)
    assert (out / "checkpoints" / "step_000002" / "adapter" / "adapter_model.safetensors").is_file()
    listed = httpx.get(f"{server.base_url}/v1/models", timeout=10).json()["data"]
    assert [m["id"] for m in listed] == [str(tiny_model_dir)]


@pytest.mark.slow
@pytest.mark.vllm
def test_two_lora_steps_under_zero3_with_a_vllm_server(
    lora_vllm_server, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """What adapter-only sync is for: ZeRO-3 shards the adapter with the rest, each process gathers it, the
    main process alone sends it (never the merged weights), and the server's greedy tokens follow it."""
    pytest.importorskip("deepspeed")
    import httpx

    server = lora_vllm_server
    out = tmp_path / "zero3_lora"
    proc = _launch("deepspeed_zero3.yaml", tiny_model_dir, out, *_lora_through_vllm(server.base_url))
    steps = _check_run(proc, tiny_model_dir, out)  # check_sync raised in the run if the server lagged
    full_bytes = (tiny_model_dir / "model.safetensors").stat().st_size
    assert all(0 < r["sync/bytes"] < full_bytes / 2 for r in steps)
    assert (out / "checkpoints" / "step_000002" / "adapter" / "adapter_model.safetensors").is_file()
    listed = httpx.get(f"{server.base_url}/v1/models", timeout=10).json()["data"]
    assert [m["id"] for m in listed] == [str(tiny_model_dir)]  # the run unloaded its adapter at the end
