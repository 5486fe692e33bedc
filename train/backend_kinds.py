"""What differs between the rollout backends, asked of the backend's kind: the one place that reads
``rollout.backend`` (``backend_kind``).

A kind says what its backend holds in the memory plan (``memory_rows``), the dtype it samples in
(``sampling_dtype``), the ZeRO stage a plan that does not fit should try (``zero_stage_remedy``), what it
checks before the policy loads (``check_before_load``) and the options ``envs.build.make_backend`` builds it
with (``build_options``). The trainer, the memory plan and its check ask the kind and never name a backend.
"""

from __future__ import annotations

from typing import Any, ClassVar

from envs.serving.transfer import NcclSettings
from train.config import RolloutConfig, TrainConfig
from train.plan_inputs import ModelShapes, Setup

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

Line = tuple[str, str, int, str]
"""One row of the memory plan (``train.memory_plan.Row``): its part (``held``, ``step``, ``generation``),
name, bytes and note."""
# The model's shapes and the setup come from ``train.plan_inputs``: the plan asks the kinds, so the kinds
# may not import the plan.


def kv_cache_bytes(cfg: TrainConfig, s: ModelShapes, act: int) -> int:
    """The KV cache of every rollout of a step at ``env.max_total_tokens``, ``act`` bytes a value."""
    rows, tokens = cfg.rollout.prompts_per_step * cfg.rollout.group_size, cfg.env.max_total_tokens
    return int(rows * tokens * 2 * s.layers * s.kv_heads * s.head_dim * act)


class BackendKind:
    """A backend as the trainer and the memory plan see it (the defaults: a backend that holds nothing of
    the device, checks nothing and takes no options)."""

    name: ClassVar[str]
    zero_stage_remedy: ClassVar[int] = 3
    """The ZeRO stage a plan that does not fit suggests (3 shards the weights, which only a backend holding
    its own copy of them can sample beside)."""

    def sampling_dtype(self, resolved: str | None) -> str | None:
        """The dtype of a sampling copy of the policy that the trainer keeps (``rollout.inference_dtype``,
        resolved): None, the policy itself or no copy at all."""
        return None

    def memory_rows(self, cfg: TrainConfig, s: ModelShapes, setup: Setup) -> list[Line]:
        """What the backend holds on the trainer's device, as rows of the memory plan."""
        raise NotImplementedError

    def check_before_load(self, cfg: TrainConfig) -> None:
        """Raise ``ValueError`` naming the field before the policy loads (a second, not a model load)."""
        return None

    def build_options(self, cfg: TrainConfig, shapes: ModelShapes | None, setup: Setup) -> dict[str, Any]:
        """``envs.build.make_backend``'s keyword arguments for this kind, on the model of ``shapes`` (None
        where the plan cannot read it) and ``setup`` (``train.memory_check.make_setup``)."""
        return {}


class LocalKind(BackendKind):
    """transformers in the trainer's process, sampling from the policy or a copy of it."""

    name = "local"
    zero_stage_remedy = 2  # it samples from the trainer's own weights, which ZeRO-3 shards

    def sampling_dtype(self, resolved: str | None) -> str | None:
        return resolved

    def memory_rows(self, cfg: TrainConfig, s: ModelShapes, setup: Setup) -> list[Line]:
        dtype = setup.inference_dtype or cfg.model.dtype
        if cfg.model.lora is None and dtype == cfg.model.dtype:
            copy = ("held", "sampling copy", 0, "none: the policy samples")
        else:
            why = "the merged adapter" if cfg.model.lora is not None else "rollout.inference_dtype"
            copy = ("held", "sampling copy", s.parameters * DTYPE_BYTES[dtype], f"{dtype}, for {why}")
        act = DTYPE_BYTES[dtype]
        rows, tokens = cfg.rollout.prompts_per_step * cfg.rollout.group_size, cfg.env.max_total_tokens
        prefill = rows * tokens * (3 * s.intermediate + 2 * s.hidden) * act  # one layer's MLP in flight
        return [
            copy,
            ("generation", "KV cache", kv_cache_bytes(cfg, s, act), f"{rows} rollouts x {tokens} tokens"),
            ("generation", "prefill", prefill, "one layer's activations of every rollout"),
        ]

    def build_options(self, cfg: TrainConfig, shapes: ModelShapes | None, setup: Setup) -> dict[str, Any]:
        from train.distributed import resolve_inference_dtype

        return {
            "max_batch_rows": cfg.rollout.prompts_per_step * cfg.rollout.group_size,
            "sampling_dtype": resolve_inference_dtype(cfg.rollout.inference_dtype),
        }


class ServerKind(BackendKind):
    """``vllm serve`` processes reached over HTTP: they hold their own weights and cache."""

    name = "vllm"

    def memory_rows(self, cfg: TrainConfig, s: ModelShapes, setup: Setup) -> list[Line]:
        return [
            ("held", "sampling copy", 0, "none: the vLLM servers hold theirs"),
            ("generation", "KV cache", 0, "on the vLLM servers"),
        ]

    def check_before_load(self, cfg: TrainConfig) -> None:
        """The NCCL path: this host can run it (CUDA, NCCL, vLLM's CUDA build). A LoRA run: every server
        loads adapters of its rank at run time (``--enable-lora``)."""
        if cfg.rollout.transfer.path == "nccl":
            from envs.serving.transfer import check_nccl_host

            check_nccl_host()
        if cfg.model.lora is None:
            return
        from envs.serving.adapters import check_lora_server

        for url in cfg.rollout.vllm_urls:
            try:
                check_lora_server(url, cfg.model.lora.r)
            except ValueError as exc:
                raise ValueError(f"model.lora.r: {exc}") from None

    def build_options(self, cfg: TrainConfig, shapes: ModelShapes | None, setup: Setup) -> dict[str, Any]:
        transfer = cfg.rollout.transfer
        nccl = (
            NcclSettings(transfer.address, transfer.port, transfer.buffer_mib << 20, transfer.timeout_s)
            if transfer.path == "nccl"
            else None
        )
        return {"vllm_urls": cfg.rollout.vllm_urls, "weights_dir": cfg.rollout.weights_dir, "nccl": nccl}


class ColocateKind(BackendKind):
    """A vLLM engine in the trainer's process (``envs.backends.colocate``): its own weights and KV cache,
    on the trainer's device."""

    name = "vllm_colocate"

    def engine_dtype(self, cfg: TrainConfig, setup: Setup) -> str:
        """``rollout.colocate.dtype`` resolved as the engine resolves it
        (``envs.backends.vllm_engine.engine_dtype``): ``auto`` is bfloat16 on a GPU and on a CPU that
        computes it natively, float32 on other CPUs."""
        from train.distributed import cpu_has_native_bf16

        dtype = cfg.rollout.colocate.dtype
        if dtype != "auto":
            return dtype
        return "float32" if setup.device == "cpu" and not cpu_has_native_bf16() else "bfloat16"

    def sleeps(self, cfg: TrainConfig, setup: Setup) -> bool:
        """Whether the engine gives its memory back while the policy trains (sleep mode, a GPU only)."""
        return cfg.rollout.colocate.sleep and setup.device != "cpu"

    def kv_cache_bytes(self, cfg: TrainConfig, s: ModelShapes | None, setup: Setup) -> int:
        """The engine's KV cache: ``rollout.colocate.kv_cache_gib``, else every rollout of a step at
        ``env.max_total_tokens`` in the engine's dtype (``s`` None: an architecture the plan cannot read,
        which ``build_options`` refuses without ``kv_cache_gib``)."""
        if cfg.rollout.colocate.kv_cache_gib is not None:
            return int(cfg.rollout.colocate.kv_cache_gib * GIB)
        assert s is not None  # build_options checked it
        return kv_cache_bytes(cfg, s, DTYPE_BYTES[self.engine_dtype(cfg, setup)])

    def memory_rows(self, cfg: TrainConfig, s: ModelShapes, setup: Setup) -> list[Line]:
        dtype = self.engine_dtype(cfg, setup)
        part, when = ("generation", "; asleep while training") if self.sleeps(cfg, setup) else ("held", "")
        rows, tokens = cfg.rollout.prompts_per_step * cfg.rollout.group_size, cfg.env.max_total_tokens
        kv_note = (
            f"rollout.colocate.kv_cache_gib{when}"
            if cfg.rollout.colocate.kv_cache_gib is not None
            else f"{rows} rollouts x {tokens} tokens{when}"
        )
        act, batched = DTYPE_BYTES[dtype], self.batched_tokens(cfg)
        forward = batched * (3 * s.intermediate + 2 * s.hidden) * act  # one layer's MLP in flight
        logits = cfg.rollout.colocate.max_num_seqs * s.vocab * 4  # the sampler's float32 logits of a decode
        return [
            ("held", "sampling copy", 0, "none: the colocated engine holds its own"),
            (part, "engine weights", s.parameters * act, f"vLLM's, in {dtype}{when}"),
            (part, "engine KV cache", self.kv_cache_bytes(cfg, s, setup), kv_note),
            ("generation", "engine forward", forward + logits, f"{batched} tokens a step; sampler logits"),
        ]

    def batched_tokens(self, cfg: TrainConfig) -> int:
        """The most tokens one engine step runs (vLLM's ``max_num_batched_tokens``): a whole sequence, and
        at least 8192."""
        return max(cfg.env.max_total_tokens, 8192)

    def check_before_load(self, cfg: TrainConfig) -> None:
        """vLLM must be installed here; and no LoRA policy under ZeRO-3 (its merged weights would be merged
        from shards: not built yet)."""
        import importlib.util

        from train.config import launched_zero_stage

        if importlib.util.find_spec("vllm") is None:
            raise ValueError(
                "rollout.backend: 'vllm_colocate' runs vLLM in this process, and vLLM is not installed in "
                "this environment: run ./install.sh --with-vllm, or use backend 'local'"
            )
        if cfg.model.lora is not None and launched_zero_stage() == 3:
            raise ValueError(
                "rollout.backend: 'vllm_colocate' does not take a LoRA policy under DeepSpeed ZeRO-3 yet "
                "(its adapter's merge would read sharded weights); use ZeRO-2, or full weights"
            )

    def build_options(self, cfg: TrainConfig, shapes: ModelShapes | None, setup: Setup) -> dict[str, Any]:
        colocate = cfg.rollout.colocate
        if shapes is None and colocate.kv_cache_gib is None:
            raise ValueError(
                "rollout.colocate.kv_cache_gib: the memory plan cannot read this model's architecture, so it "
                "cannot size the engine's KV cache; set it"
            )
        return {
            "colocate": {
                "max_model_len": cfg.env.max_total_tokens,
                "kv_cache_bytes": self.kv_cache_bytes(cfg, shapes, setup),
                "dtype": self.engine_dtype(cfg, setup),
                "sleep": colocate.sleep,
                "seed": cfg.seed,
                "max_num_seqs": colocate.max_num_seqs,
                "max_num_batched_tokens": self.batched_tokens(cfg),
            }
        }


KINDS: dict[str, BackendKind] = {kind.name: kind for kind in (LocalKind(), ServerKind(), ColocateKind())}


def backend_kind(rollout: RolloutConfig) -> BackendKind:
    """The kind of ``rollout.backend``."""
    return KINDS[rollout.backend]
