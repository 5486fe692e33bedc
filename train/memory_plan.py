"""The memory plan: the bytes a run will hold on its device, estimated from the run config and the model's
``config.json`` before any weight is loaded (``docs/training.md``, The memory plan).

The architecture is built on PyTorch's meta device (shapes, no storage), so parameter counts, the linear
layers a LoRA adapter targets and the output head are exact for any transformers causal LM; activations
follow the tensors a decoder layer keeps for its backward pass (``_layer_bytes_per_token``). The plan has
three parts, because a step first generates and then trains, never both at once:

- held throughout: weights, DeepSpeed's fp32 master copy, the AdamW moments, the KL reference, the local
  backend's sampling copy, a colocated vLLM engine that does not sleep (its weights and KV cache);
- the training step: gradients, the half-precision copies of the weights that autocast keeps for the
  backward pass, and the activations and logits of the largest micro-batch (``optim.micro_batch_size``
  sequences of ``env.max_total_tokens``);
- generation: the local backend's KV cache of every rollout of a step at ``env.max_total_tokens`` and a
  prefill's activations, or a sleeping colocated engine's weights and KV cache (vLLM servers: nothing here).

What the backend holds is its kind's to say (``train.backend_kinds``).

The peak is the first part plus the larger of the other two. ZeRO-2 divides gradients, the master copy and
the AdamW moments by the processes; ZeRO-3 the weights too. The estimate is checked against a training
step's measured RSS (``benchmarks/memory_plan_vs_rss.py``, ``tests/train/test_memory_plan.py``); it leaves
out the CUDA context and the allocator's fragmentation, so a plan fits a device only when its peak is at
most ``FIT_FRACTION`` of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from train.backend_kinds import DTYPE_BYTES, backend_kind
from train.config import TrainConfig
from train.plan_inputs import ModelShapes, Setup

FIT_FRACTION = 0.9
"""A plan fits when its peak is at most this share of the device's memory (the rest: CUDA context,
allocator fragmentation, the error of the estimate)."""
LOGIT_BYTES = {4: 8, 2: 4}
"""Bytes per logit of a micro-batch during its backward pass, by the bytes of the head's output
(``_activation_rows``)."""


def read_shapes(config_json: str | Path) -> ModelShapes:
    """The shapes of the causal LM that ``config_json`` describes, built on the meta device (no memory).

    Raises:
        ValueError: naming the file when it is not such a config (a Llama- or Qwen2-like decoder)."""
    import torch
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    from envs.models.loading import hub_kernels_off

    hub_kernels_off()  # as every model the project builds (envs.models.loading)
    path = Path(config_json)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        fields = {k: v for k, v in data.items() if k not in ("model_type", "transformers_version")}
        config = AutoConfig.for_model(data["model_type"], **fields)
        # the class itself, not ``from_config``: under a ZeRO-3 launch that would partition and initialise
        causal_lm: Any = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
        with torch.device("meta"):
            model = causal_lm(config)
        head = model.get_output_embeddings()
        heads = int(config.num_attention_heads)
        return ModelShapes(
            parameters=sum(p.numel() for p in model.parameters()),
            linear=tuple(
                (name.rsplit(".", 1)[-1], module.in_features, module.out_features)
                for name, module in model.named_modules()
                if isinstance(module, torch.nn.Linear) and module is not head
            ),
            head_parameters=head.weight.numel(),
            hidden=int(config.hidden_size),
            layers=int(config.num_hidden_layers),
            heads=heads,
            kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
            head_dim=int(getattr(config, "head_dim", None) or config.hidden_size // heads),
            intermediate=int(config.intermediate_size),
            vocab=int(config.vocab_size),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(
            f"{path}: the memory plan cannot read this architecture ({exc!r}); it knows decoder-only "
            "transformers causal LMs with hidden_size, intermediate_size and num_attention_heads"
        ) from None


@dataclass(frozen=True)
class Row:
    """One line of the plan."""

    part: str
    """``held``, ``step`` or ``generation``."""
    name: str
    bytes: int
    note: str


@dataclass(frozen=True)
class MemoryPlan:
    """The estimated bytes of one process of a run."""

    rows: tuple[Row, ...]
    setup: Setup

    def part(self, name: str) -> int:
        """The bytes of one part (``held``, ``step``, ``generation``)."""
        return sum(r.bytes for r in self.rows if r.part == name)

    @property
    def peak(self) -> int:
        """What is held throughout, plus the larger of the training step and generation."""
        return self.part("held") + max(self.part("step"), self.part("generation"))

    @property
    def budget(self) -> int | None:
        """The bytes a process may plan for: ``FIT_FRACTION`` of its device's memory."""
        device = self.setup.device_bytes
        if device is None:
            return None
        per_process = device // self.setup.processes if self.setup.device == "cpu" else device
        return int(FIT_FRACTION * per_process)

    @property
    def fits(self) -> bool | None:
        """Whether the peak is within the budget (None without a device size)."""
        return None if self.budget is None else self.peak <= self.budget


def _layer_bytes_per_token(s: ModelShapes, act: int, residual: int, autocast: bool) -> int:
    """Bytes one decoder layer keeps for its backward pass per token (pre-norm attention + gated MLP, the
    Llama/Qwen2 layout): each RMSNorm its float32 input and normalised output; the projections' inputs; q, k,
    v, their rotary halves and rotated copies, the attention output; the MLP's gate, up, activation and
    product. ``act``: bytes of an activation; under autocast over wider weights, each of the q, k, v, gate
    and up projections keeps its own half-precision copy of its input."""
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    norms = 2 * 2 * s.hidden * max(residual, 4)
    attention = s.hidden + (q + 2 * kv) + 2 * (q + kv) + q
    mlp = s.hidden + 4 * s.intermediate
    casts = 3 * s.hidden if autocast else 0
    return norms + act * (attention + mlp + casts)


def _adapted_linears(cfg: TrainConfig, s: ModelShapes) -> list[tuple[str, int, int]]:
    """The linear layers of every decoder layer that the LoRA adapter targets (default: all)."""
    lora = cfg.model.lora
    assert lora is not None
    names = set(lora.target_modules or [name for name, _, _ in s.linear])
    return [linear for linear in s.linear if linear[0] in names]


def _adapter_parameters(cfg: TrainConfig, s: ModelShapes) -> int:
    """Parameters of the LoRA adapter: ``r * (in + out)`` per targeted linear layer."""
    assert cfg.model.lora is not None
    return sum(cfg.model.lora.r * (n_in + n_out) for _, n_in, n_out in _adapted_linears(cfg, s))


def _adapter_bytes_per_token(cfg: TrainConfig, s: ModelShapes, setup: Setup) -> int:
    """Bytes a LoRA adapter adds to one decoder layer's saved activations per token. peft casts each targeted
    linear's input to the adapter's float32: under autocast, the adapter's matmul keeps a half-precision copy
    of it (2 bytes an input element); without autocast, a base in half precision keeps the float32 copy (4),
    and a float32 base keeps nothing new unless dropout makes one (4). Dropout adds its mask (1), and the
    adapter's down-projection its ``r`` outputs for the up-projection's backward."""
    lora = cfg.model.lora
    if lora is None:
        return 0
    adapted = _adapted_linears(cfg, s)  # over all layers
    inputs = sum(n_in for _, n_in, _ in adapted)
    autocast = setup.half_autocast
    if autocast:
        copy = 2
    elif DTYPE_BYTES[cfg.model.dtype] < 4 or lora.dropout > 0:
        copy = 4
    else:
        copy = 0
    mask = 1 if lora.dropout > 0 else 0
    return (inputs * (copy + mask) + len(adapted) * lora.r * (2 if autocast else 4)) // s.layers


def _activation_rows(cfg: TrainConfig, s: ModelShapes, setup: Setup) -> list[Row]:
    """The training step's activations and logits of the largest micro-batch."""
    weight = DTYPE_BYTES[cfg.model.dtype]
    autocast = setup.half_autocast and weight > 2  # a half-precision base is not cast
    act = 2 if autocast else weight
    tokens = cfg.optim.micro_batch_size * cfg.env.max_total_tokens
    per_token = _layer_bytes_per_token(s, act, weight, autocast) + _adapter_bytes_per_token(cfg, s, setup)
    layer = per_token * tokens
    if cfg.model.attn_implementation == "eager":  # its float32 softmax and the probabilities, [B, h, T, T]
        layer += tokens * s.heads * cfg.env.max_total_tokens * (4 + act)
    if cfg.model.gradient_checkpointing:  # each layer's input, and one layer recomputed, in its backward
        layers, how = (
            s.layers * s.hidden * weight * tokens + 2 * layer,
            "checkpointed: layer inputs + 2 layers",
        )
    else:  # every layer, and one more layer's worth of gradients in flight
        layers, how = (s.layers + 1) * layer, f"{s.layers} layers + 1 in backward"
    chunk = cfg.optim.logits_chunk_tokens
    positions = min(chunk, tokens) if chunk > 0 else tokens
    # per logit: the head's output, which is all the loss keeps for its backward (train.loss.target_logprobs
    # works a fixed-size float32 chunk at a time), and in the backward its gradient, in the same dtype:
    # 8 bytes (float32), 4 (half)
    logits = positions * s.vocab * LOGIT_BYTES[2 if autocast else weight]
    shape = f"{cfg.optim.micro_batch_size} x {cfg.env.max_total_tokens} tokens"
    return [
        Row("step", "activations", layers, f"{shape}; {how}"),
        Row(
            "step",
            "logits",
            logits,
            f"[{positions} x {s.vocab}] "
            + ("chunked" if chunk else f"x {LOGIT_BYTES[2 if autocast else weight]} bytes"),
        ),
    ]


def estimate(cfg: TrainConfig, s: ModelShapes, setup: Setup) -> MemoryPlan:
    """The memory plan of one process of ``cfg`` on ``setup``."""
    n, stage, weight = setup.processes, setup.zero_stage, DTYPE_BYTES[cfg.model.dtype]
    shard_weights, shard_state = (n if stage == 3 else 1), (n if stage >= 1 else 1)
    lora = cfg.model.lora is not None
    trainable = _adapter_parameters(cfg, s) if lora else s.parameters
    state = 4 if lora else weight  # peft keeps the adapter in float32; AdamW's moments match the weights
    adapter_note = f"{trainable / 1e6:.1f}M adapter parameters in fp32" if lora else ""
    sharding = f", / {n} (ZeRO-{stage})" if stage else ""
    rows = [
        Row(
            "held",
            "weights",
            (s.parameters * weight + (trainable * 4 if lora else 0)) // shard_weights,
            f"{s.parameters / 1e9:.2f}B x {cfg.model.dtype}"
            + (f" + {adapter_note}" if lora else "")
            + (sharding if stage == 3 else ""),
        ),
        Row(
            "held",
            "master copy",
            trainable * 4 // shard_state if stage else 0,
            "DeepSpeed's fp32 partition" + sharding if stage else "none: the trained weights are the master",
        ),
        Row("held", "optimizer state", 2 * trainable * state // shard_state, "AdamW: 2 moments" + sharding),
        _reference_row(cfg, s, weight),
        Row("step", "gradients", trainable * state // shard_state, "of the trained parameters" + sharding),
    ]
    autocast = setup.half_autocast and weight > 2  # a half-precision base is not cast
    cast = sum(n_in * n_out for _, n_in, n_out in s.linear) + s.head_parameters
    if cfg.model.gradient_checkpointing:  # only the recomputed layer's and the head's
        cast = cast // s.layers + s.head_parameters
    rows.append(
        Row("step", "autocast copies", 2 * cast if autocast else 0, "half-precision weights for backward")
    )
    rows += _activation_rows(cfg, s, setup)
    rows += [
        Row(*line) for line in backend_kind(cfg.rollout).memory_rows(cfg, s, setup)
    ]  # its copy, cache, engine: held or not
    return MemoryPlan(tuple(rows), setup)


def _reference_row(cfg: TrainConfig, s: ModelShapes, weight: int) -> Row:
    if cfg.loss.beta == 0:
        return Row("held", "KL reference", 0, "none: loss.beta is 0")
    if cfg.model.lora is not None:
        return Row("held", "KL reference", 0, "none: the policy with its adapter off")
    return Row("held", "KL reference", s.parameters * weight, f"a frozen copy in {cfg.model.dtype}")
