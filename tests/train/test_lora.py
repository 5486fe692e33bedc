"""LoRA (``model.lora``): only the adapter trains, the KL reference is the policy with its adapter off, the
local backend samples the merged weights, checkpoints hold the adapter and resume exactly, and the final
``model/`` is the merged model."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch

from tests.support.lora_deepspeed_driver import batch as fixed_batch
from tests.train.runs import metrics, run_config
from train.config_files import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]
QWEN2_LINEARS = ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("model.lora.r=0", "model.lora.r"),
        ("model.lora.alpha=-1", "model.lora.alpha"),
        ("model.lora.dropout=1.0", "model.lora.dropout"),
        ("model.lora.target_modules=[]", "model.lora.target_modules"),
        ("model.lora.target_modules=[lm_head]", "model.lora.target_modules"),
        ("model.lora.target_modules=[model.q_proj]", "model.lora.target_modules"),
        ("model.lora.target_modules=[q_proj, q_proj]", "model.lora.target_modules"),
        ("model.lora.rank=8", "model.lora.rank"),
    ],
)
def test_bad_lora_values_name_the_field(override: str, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(ROOT / "configs/train/tiny_test.yaml", [override])


def test_lora_refuses_what_it_cannot_do_yet() -> None:
    tiny = ROOT / "configs/train/tiny_test.yaml"
    vllm = ["model.lora={}", "rollout.backend=vllm", "rollout.vllm_urls=[http://localhost:8000]"]
    assert load_config(tiny, vllm).model.lora is not None  # the adapter alone goes to the servers
    with pytest.raises(ConfigError, match=r"model\.lora\.r: .* up to 512, not 1024"):
        load_config(tiny, [*vllm, "model.lora.r=1024"])
    with pytest.raises(ConfigError, match=r"model\.lora: not with warm_start"):
        load_config(tiny, ["model.lora={}", "warm_start.demonstrations=demos.jsonl"])
    cfg = load_config(tiny, ["model.lora={}"])
    assert cfg.model.lora is not None and cfg.model.lora.target_modules is None and cfg.model.lora.r == 16
    assert load_config(tiny).model.lora is None  # absent: full weights


def _policy(tiny_model_dir: Path, tmp_path: Path, *overrides: str) -> tuple[Any, Any, Any]:
    """The config, accelerator and policy of a LoRA run on the tiny model."""
    from accelerate import Accelerator

    from train.policy import load_policy

    cfg = run_config("tiny_test.yaml", tiny_model_dir, tmp_path / "run", "model.lora={}", *overrides)
    accelerator = Accelerator(cpu=True)
    return cfg, accelerator, load_policy(cfg, accelerator)


def _step(cfg: Any, accelerator: Any, policy: Any) -> dict[str, float]:
    from train.step import train_step

    return train_step(
        policy.model,
        policy.ref_model,
        fixed_batch(0, 0),
        cfg,
        accelerator,
        policy.optimizer,
        policy.scheduler,
    )


def test_default_targets_are_every_linear_layer_but_the_head(tiny_model_dir: Path) -> None:
    from envs.models.loading import load_causal_lm
    from train.lora import linear_layer_names

    assert linear_layer_names(load_causal_lm(tiny_model_dir)) == QWEN2_LINEARS


def test_only_the_adapter_is_trained(tiny_model_dir: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    cfg, accelerator, policy = _policy(tiny_model_dir, tmp_path, "optim.learning_rate=0.05")
    named = dict(policy.model.named_parameters())
    lora = {name for name in named if ".lora_" in name}
    # one A and one B per linear layer: 7 linear layers in each of the tiny model's layers
    layers = policy.model.get_base_model().config.num_hidden_layers
    assert len(lora) == 2 * len(QWEN2_LINEARS) * layers
    in_optimizer = {id(p) for group in policy.optimizer.param_groups for p in group["params"]}
    assert in_optimizer == {id(named[name]) for name in lora}
    assert {name for name, p in named.items() if p.requires_grad} == lora
    b_before = {name: named[name].detach().clone() for name in lora if ".lora_B." in name}

    stats = _step(cfg, accelerator, policy)

    assert stats["grad_norm"] > 0
    assert all(not torch.equal(named[name], before) for name, before in b_before.items())
    base = load_file(tiny_model_dir / "model.safetensors")
    for name, tensor in policy.model.get_base_model().named_parameters():  # a tied head once
        if ".lora_" not in name:
            assert torch.equal(tensor, base[name.replace(".base_layer.", ".")]), name


def test_the_reference_is_the_base_model_without_a_second_copy(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    from train import policy as policy_module
    from train.forward import forward_logprobs
    from train.lora import AdapterOff

    loads = []
    real = policy_module.load_causal_lm
    monkeypatch.setattr(policy_module, "load_causal_lm", lambda *a, **k: loads.append(a) or real(*a, **k))
    cfg, accelerator, policy = _policy(tiny_model_dir, tmp_path, "loss.beta=0.1", "optim.learning_rate=0.05")
    assert len(loads) == 1 and isinstance(policy.ref_model, AdapterOff)
    assert policy.ref_model.module is accelerator.unwrap_model(policy.model)
    _step(cfg, accelerator, policy)  # the adapter moves: the policy's logprobs now differ from the base's
    policy.model.train()

    batch, temperature = fixed_batch(0, 0), cfg.rollout.temperature
    base = real(tiny_model_dir).eval()
    with torch.no_grad():
        base_BT, _ = forward_logprobs(base, batch, temperature, entropy=False)
        ref_BT, _ = forward_logprobs(policy.ref_model, batch, temperature, entropy=False)
        policy.model.eval()
        adapted_BT, _ = forward_logprobs(policy.model, batch, temperature, entropy=False)
    assert torch.equal(ref_BT, base_BT)
    assert not torch.allclose(adapted_BT, base_BT)
    assert policy.ref_model.module.training is False  # the mode it was in before the call


def test_a_lora_run_asks_its_vllm_servers_before_loading_the_policy(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """A server that cannot serve the adapter stops the run before minutes of model loading, not after."""
    import socket

    from train import trainer as trainer_module

    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    loads: list[object] = []
    monkeypatch.setattr(trainer_module, "load_policy", lambda *a, **k: loads.append(a))
    overrides = ("model.lora={}", "rollout.backend=vllm", f"rollout.vllm_urls=[{url}]")
    cfg = run_config("tiny_test.yaml", tiny_model_dir, tmp_path / "run", *overrides)
    with pytest.raises(ValueError, match=rf"model\.lora\.r: vLLM server {url} is unreachable"):
        trainer_module.train(cfg)
    assert loads == []


def test_the_local_backend_samples_the_merged_adapter(tiny_model_dir: Path, tmp_path: Path) -> None:
    """After a step that moved the adapter, the backend's greedy tokens are the trainer's (peft's forward),
    from a plain copy holding W + B @ A * alpha / r."""
    from envs.backends.base import compare_greedy
    from envs.backends.local import LocalBackend
    from train.backend import PolicyWeights

    cfg, accelerator, policy = _policy(tiny_model_dir, tmp_path, "optim.learning_rate=0.05")
    weights = PolicyWeights(accelerator, policy.model)
    backend = LocalBackend(weights.module, policy.tokenizer)
    sampler = backend.model
    assert type(sampler).__name__ == "Qwen2ForCausalLM" and not any(
        ".lora_" in n for n, _ in sampler.named_parameters()
    )
    q_proj = "model.layers.0.self_attn.q_proj.weight"
    before = sampler.get_parameter(q_proj).detach().clone()

    _step(cfg, accelerator, policy)
    asyncio.run(backend.sync_weights(weights, step=1))

    layer = weights.module.get_base_model().model.layers[0].self_attn.q_proj
    scale = cfg.model.lora.alpha / cfg.model.lora.r
    expected = (
        layer.base_layer.weight + layer.lora_B["default"].weight @ layer.lora_A["default"].weight * scale
    )
    assert torch.allclose(sampler.get_parameter(q_proj), expected, atol=1e-6)
    assert not torch.equal(sampler.get_parameter(q_proj), before)
    weights.module.eval()

    async def greedy_then_close() -> None:  # one event loop: the backend's batching task lives on it
        await compare_greedy(backend, weights, policy.tokenizer, tokens=12)
        await backend.close()

    asyncio.run(greedy_then_close())
    assert backend.weight_version == 1


def test_checkpoints_hold_the_adapter_and_the_final_model_is_merged(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from accelerate import Accelerator

    from envs.models.loading import load_causal_lm
    from train.checkpoint import TrainerState, load_latest, save_checkpoint
    from train.policy import load_policy
    from train.run_folder import RunFolder

    cfg, accelerator, policy = _policy(tiny_model_dir, tmp_path, "optim.learning_rate=0.05")
    _step(cfg, accelerator, policy)
    final = save_checkpoint(
        accelerator,
        RunFolder(tmp_path / "run"),
        TrainerState(1),
        model=policy.model,
        tokenizer=policy.tokenizer,
    )

    assert (final / "adapter" / "adapter_config.json").is_file()
    assert not (final / "model.safetensors").exists()  # the base weights are not saved again
    merged = load_causal_lm(final / "model").eval()
    assert not any(".lora_" in name for name, _ in merged.named_parameters())
    ids = fixed_batch(0, 0).input_ids_BT
    adapted = accelerator.unwrap_model(policy.model).eval()
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=ids).logits, adapted(input_ids=ids).logits, atol=1e-5)

    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state()
    GradientState._reset_state()
    other = Accelerator(cpu=True)
    resumed = load_policy(cfg, other)
    assert load_latest(other, RunFolder(tmp_path / "run")) is not None
    saved = dict(accelerator.unwrap_model(policy.model).named_parameters())
    for name, param in other.unwrap_model(resumed.model).named_parameters():
        assert torch.equal(param, saved[name]), name
    assert resumed.optimizer.state_dict()["state"].keys() == policy.optimizer.state_dict()["state"].keys()


UNTIMED = ("time/", "tokens_per_s/", "memory/", "wall_time")


@pytest.mark.slow
def test_a_lora_run_resumed_after_2_steps_equals_4_uninterrupted_steps(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """Key by key, every logged number of steps 3 and 4 but the clock's, and the final merged weights."""
    from accelerate.state import AcceleratorState, GradientState
    from safetensors.torch import load_file

    from train.trainer import train

    monkeypatch.chdir(ROOT)

    def run(folder: str, steps: int) -> None:
        overrides = ("model.lora={}", "loss.beta=0.05", "env.eval_fraction=0", "logging.wandb_mode=disabled")
        train(
            run_config("tiny_test.yaml", tiny_model_dir, tmp_path / folder, f"max_steps={steps}", *overrides)
        )
        AcceleratorState._reset_state()
        GradientState._reset_state()

    run("whole", 4)
    run("resumed", 2)
    run("resumed", 4)

    def rows(folder: str) -> dict[int, dict[str, Any]]:
        found = [r for r in metrics(tmp_path / folder) if "train/learning_rate" in r]
        assert len(found) == 4  # the resumed run went on from step 2, it did not start again
        return {r["step"]: {k: v for k, v in r.items() if not k.startswith(UNTIMED)} for r in found}

    whole, resumed = rows("whole"), rows("resumed")
    assert sorted(whole) == sorted(resumed) == [1, 2, 3, 4]
    for step in (3, 4):
        assert whole[step].keys() == resumed[step].keys()
        differing = [k for k in whole[step] if whole[step][k] != resumed[step][k]]
        assert not differing, f"step {step}: {[(k, whole[step][k], resumed[step][k]) for k in differing]}"
    assert whole[4]["train/grad_norm"] > 0 and whole[4]["train/kl/mean"] > 0  # the adapter moved off the base

    def final(folder: str) -> dict[str, Any]:
        return load_file(tmp_path / folder / "checkpoints" / "step_000004" / "model" / "model.safetensors")

    a, b = final("whole"), final("resumed")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_shared_prompts_through_the_adapter_and_with_it_off(tiny_model_dir: Path, tmp_path: Path) -> None:
    """``optim.share_prefix`` on a LoRA policy: the prompt's KV cache passes through peft, for the adapted
    policy (logprobs and the adapter's gradients) and for its reference with the adapter off."""
    from tests.train.test_step import _two_groups_and_a_stray
    from train.batching import collate
    from train.forward import forward_logprobs, prefix_clusters

    cfg, accelerator, policy = _policy(tiny_model_dir, tmp_path, "loss.beta=0.1", "optim.learning_rate=0.05")
    _step(cfg, accelerator, policy)  # the adapter moves away from zero
    policy.model.train()
    batch = collate(_two_groups_and_a_stray(), [1.0] * 8, [False] * 8, pad_token_id=0)
    clusters = prefix_clusters(batch)
    mask = batch.loss_mask_BT.bool()
    results = []
    for share in (False, True):
        policy.model.zero_grad()
        lp, _ = forward_logprobs(policy.model, batch, 0.7, clusters=clusters if share else None)
        (lp * batch.loss_mask_BT).sum().backward()
        grads = [p.grad.clone() for p in policy.model.parameters() if p.requires_grad and p.grad is not None]
        with torch.no_grad():
            ref, _ = forward_logprobs(
                policy.ref_model, batch, 0.7, entropy=False, clusters=clusters if share else None
            )
        results.append((lp.detach()[mask], grads, ref[mask]))
    (lp, grads, ref), (shared_lp, shared_grads, shared_ref) = results
    assert torch.allclose(shared_lp, lp, atol=1e-5) and torch.allclose(shared_ref, ref, atol=1e-5)
    assert not torch.allclose(ref, lp, atol=1e-4)  # the adapter changes the logprobs: two models compared
    assert len(grads) == len(shared_grads) > 0
    for got, want in zip(shared_grads, grads, strict=True):  # float sums in another order
        assert float((got - want).norm()) <= 1e-4 * float(want.norm()) and float(want.norm()) > 0
