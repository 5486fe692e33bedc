"""What differs by backend, asked of its kind (``train.backend_kinds``): every backend the config accepts has
one, the colocated engine's rows in the memory plan by hand (held on a CPU, under generation where it sleeps
on a GPU), its options, and what it refuses before the policy loads."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from tests.support.vllm_fixtures import vllm_in_process_or_skip
from train import distributed
from train.backend_kinds import KINDS, ColocateKind, backend_kind
from train.config import RolloutConfig
from train.config_files import load_config
from train.memory_plan import estimate, read_shapes
from train.plan_inputs import Setup

ROOT = Path(__file__).resolve().parents[2]
QWEN_7B = ROOT / "configs/models/qwen2.5-7b-instruct.json"
GIB = 2**30


def _cfg(*overrides: str):
    return load_config(ROOT / "configs/train/tiny_test.yaml", ["rollout.backend=vllm_colocate", *overrides])


def test_every_backend_the_config_accepts_has_a_kind() -> None:
    accepted = typing.get_args(RolloutConfig.model_fields["backend"].annotation)
    assert set(accepted) == set(KINDS)
    assert all(backend_kind(RolloutConfig(backend=b, vllm_urls=["http://x"])).name == b for b in accepted)


def test_colocated_rows_by_hand_held_on_a_cpu_asleep_on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(distributed, "cpu_has_native_bf16", lambda: False)
    s = read_shapes(QWEN_7B)
    cfg = _cfg()  # 2 prompts x 4 rollouts at 256 tokens
    kv_value = 2 * s.layers * s.kv_heads * s.head_dim  # a token's keys and values, in values
    cpu = {r.name: r for r in estimate(cfg, s, Setup("cpu", 512 * GIB)).rows}
    assert cpu["engine weights"].part == cpu["engine KV cache"].part == "held"
    assert cpu["engine weights"].bytes == s.parameters * 4  # float32 on a CPU without native bf16
    assert cpu["engine KV cache"].bytes == 8 * 256 * kv_value * 4
    assert cpu["engine forward"].bytes == 8192 * (3 * s.intermediate + 2 * s.hidden) * 4 + 256 * s.vocab * 4
    assert cpu["sampling copy"].bytes == 0

    gpu = {r.name: r for r in estimate(cfg, s, Setup("stated", 80 * GIB)).rows}
    assert gpu["engine weights"].part == gpu["engine KV cache"].part == "generation"  # asleep while training
    assert gpu["engine weights"].bytes == s.parameters * 2  # bfloat16 on a GPU
    awake = {
        r.name: r for r in estimate(_cfg("rollout.colocate.sleep=false"), s, Setup("stated", 80 * GIB)).rows
    }
    assert awake["engine weights"].part == "held"
    fixed = {
        r.name: r
        for r in estimate(_cfg("rollout.colocate.kv_cache_gib=3"), s, Setup("stated", 80 * GIB)).rows
    }
    assert fixed["engine KV cache"].bytes == 3 * GIB


def test_the_build_options_come_from_the_plan() -> None:
    s = read_shapes(QWEN_7B)
    options = ColocateKind().build_options(
        _cfg("rollout.colocate.dtype=float16"), s, Setup("stated", 80 * GIB)
    )
    engine = options["colocate"]
    assert engine["max_model_len"] == 256 and engine["dtype"] == "float16" and engine["sleep"] is True
    assert engine["kv_cache_bytes"] == 8 * 256 * 2 * s.layers * s.kv_heads * s.head_dim * 2
    with pytest.raises(ValueError, match=r"rollout\.colocate\.kv_cache_gib: the memory plan cannot read"):
        ColocateKind().build_options(_cfg(), None, Setup("cpu", 64 * GIB))
    assert ColocateKind().build_options(_cfg("rollout.colocate.kv_cache_gib=1"), None, Setup("cpu", GIB))


def test_without_vllm_installed_the_run_stops_before_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    with pytest.raises(
        ValueError, match=r"rollout\.backend: 'vllm_colocate' .* run ./install.sh --with-vllm"
    ):
        ColocateKind().check_before_load(_cfg())


def test_a_lora_policy_under_zero3_is_refused_before_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    vllm_in_process_or_skip()
    cfg = _cfg("model.lora={}")
    ColocateKind().check_before_load(cfg)  # no DeepSpeed: fine
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    with pytest.raises(
        ValueError, match="'vllm_colocate' does not take a LoRA policy under DeepSpeed ZeRO-3"
    ):
        ColocateKind().check_before_load(cfg)


def test_the_local_backends_sampling_dtype_is_rejected_for_the_engine() -> None:
    with pytest.raises(ValueError, match=r"rollout\.inference_dtype: only for backend 'local'"):
        _cfg("rollout.inference_dtype=bfloat16")


def test_the_servers_weights_folder_reaches_the_backend_and_only_the_server_backend() -> None:
    server = [
        "rollout.backend=vllm",
        "rollout.vllm_urls=[http://node7:8000]",
        "rollout.weights_dir=/shared/w",
    ]
    cfg = load_config(ROOT / "configs/train/tiny_test.yaml", server)
    options = backend_kind(cfg.rollout).build_options(cfg, None, Setup("cpu", GIB))
    assert options == {"vllm_urls": ["http://node7:8000"], "weights_dir": "/shared/w", "nccl": None}
    with pytest.raises(ValueError, match=r"rollout\.weights_dir: only backend 'vllm' writes weights"):
        _cfg("rollout.weights_dir=/shared/w")


def test_the_nccl_path_reaches_the_backend_and_is_refused_where_it_cannot_run() -> None:
    from envs.serving.transfer import NcclSettings, WeightTransferUnavailable

    server = ["rollout.backend=vllm", "rollout.vllm_urls=[http://node7:8000]"]
    nccl = ["rollout.transfer.path=nccl", "rollout.transfer.address=node1", "rollout.transfer.buffer_mib=64"]
    cfg = load_config(ROOT / "configs/train/tiny_test.yaml", [*server, *nccl])
    options = backend_kind(cfg.rollout).build_options(cfg, None, Setup("cpu", GIB))
    assert options["nccl"] == NcclSettings("node1", 29700, 64 << 20, 300.0)
    if not torch_cuda():
        with pytest.raises(WeightTransferUnavailable, match="needs a CUDA device"):
            backend_kind(cfg.rollout).check_before_load(cfg)  # at start, before the policy loads
    for refused, why in [
        (["rollout.weights_dir=/shared/w"], "writes no files"),
        (["rollout.backend=local"], "sends weights to vLLM servers"),
        (["model.lora.r=8"], "a LoRA run sends its adapter as files"),
    ]:
        with pytest.raises(ValueError, match=why):
            load_config(ROOT / "configs/train/tiny_test.yaml", [*server, *nccl, *refused])


def torch_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())
