"""Our GRPO trainer against TRL's ``GRPOTrainer`` on CPU: the same model, prompts, reward, G, lengths,
learning rate and steps, in one run.

    .venv/bin/python benchmarks/trainer_vs_trl.py [--models tiny,smollm2] [--steps-tiny 20]
        [--steps-smollm2 8] [--tokens 96] [--prompts-per-step 2] [--group-size 4] [--free-length]
        [--micro-batch-tokens N] [--share-prefix] [--colocate float32,bfloat16]

The task is single-turn: the prompts of ``configs/data/toy_prompts.jsonl`` (all twelve, nothing held out),
scored by ``rubrics.ready_made:toy_vowels`` (reward = share of vowels among the reply's letters); TRL gets the
same ``vowel_ratio`` as its reward function. Matching settings: loss ``dapo``, ``beta`` 0, one update per
batch (``num_iterations`` 1), clipping 0.2 / 0.28, group-std scaled advantages, temperature 1.0, top-p 1,
no top-k, AdamW betas (0.9, 0.99) with a constant learning rate and gradient clipping at 1.0, float32
training and sdpa, no gradient checkpointing (TRL's default is on; ours off), micro-batches of 4 with gradient accumulation
over the step (TRL: ``per_device_train_batch_size`` 4 and ``gradient_accumulation_steps`` = rows / 4).
Every completion is forced to exactly ``--tokens`` tokens (``min_tokens`` for ours, ``min_new_tokens`` in
TRL's generation kwargs), so both do the same work whatever the policy learns; ``--free-length`` lets
completions stop at end-of-sequence instead, so their lengths vary as in real runs (and differ between the
runs: compare completion tokens per second of the whole step there). ``--micro-batch-tokens N`` runs our
trainer a second time with ``optim.micro_batch_tokens`` N (sequences grouped by length under a budget of N
padded tokens instead of fixed groups of 4) and reports it against the same TRL run (``micro_batch_tokens``). Our trainer keeps its defaults elsewhere (truncated
importance-sampling correction on; TRL has none with transformers generation), and samples as the main job
does (``--inference-dtype auto``: a bfloat16 copy of the policy, refreshed after every step, where bf16 is
computed natively; the float32 policy itself, as TRL does, elsewhere); ``--inference-dtype bfloat16`` or
``float32`` forces one: CPU decoding is bound by reading the weights. ``--share-prefix`` runs our trainer a
further time with ``optim.share_prefix`` (each micro-batch, 4 replies to one prompt, runs the prompt once)
and reports it against the same TRL run (``share_prefix``). ``--colocate DTYPES`` runs our trainer once more
for each dtype, sampling with the colocated vLLM engine (``rollout.backend: vllm_colocate``, its
``rollout.colocate.dtype``; the weights loaded into it in memory after every step, counted in the step), and
reports each against the same TRL run (``colocate_<dtype>``).

Each run is its own subprocess (memory and threads isolated), one after the other, torch on every core.
Seconds per step exclude model loading and everything before the first step: for ours the per-step
``time/wait_s + time/train_s + time/sync_s`` of ``metrics.jsonl`` (generation and scoring, the optimiser
step, weight sync), for TRL the time from ``on_step_begin`` to ``on_step_end`` (generation, scoring,
forward/backward and the optimiser step). ``*_s_per_step`` is the median over the steps after the first
(a warm-up), which resists steps slowed by other work on a shared machine; the means and every step's time
are listed too, with the machine's load average before and after each run. Peak RSS is the subprocess's
``ru_maxrss``.

Prints one JSON object: per model ``ours_s_per_step``, ``trl_s_per_step``, ``speedup`` (TRL's seconds per
step over ours; target >= 1.3), ``ours_last_reward`` / ``trl_last_reward`` (mean reward of the last quarter
of the steps), first-step rewards, peak RSS, the time split of our step and of TRL's (its ``generate`` calls
against the rest), the cores each trainer kept busy
(CPU seconds over wall seconds), and completion tokens per second: ours in its generation phase, both over
the whole step, and a standalone ``generate`` of the same rows in our sampling dtype (a third subprocess;
``standalone_over_ours_generation`` is the target's ratio, at most 1.2). The work of the training passes,
whatever the hardware: ``*_forwards_per_step`` counts the model's forward calls outside generation (ours
from ``train/forwards``; TRL's by a hook on the model, ``generate`` excluded: an old-logprobs or reference
pass would show there) and ``*_padded_tokens_per_step`` the token positions they ran over, padding included.

Our trainer tunes glibc's malloc on a CPU (one arena for all threads, freed memory kept for reuse:
``train.distributed.tune_host_allocator``); the standalone generate does too. ``--trl-our-allocator`` runs TRL
a second time with the same allocator settings (``trl_our_allocator``): how much of the speedup is those
settings alone.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from train.config import TrainConfig  # noqa: E402
from train.distributed import peak_rss_gib, tune_host_allocator  # noqa: E402

DATA = ROOT / "configs" / "data" / "toy_prompts.jsonl"
BASE_CONFIG = ROOT / "configs" / "train" / "tiny_test.yaml"
RUBRIC = "rubrics.ready_made:toy_vowels"
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "WANDB_MODE": "disabled",
    "TOKENIZERS_PARALLELISM": "false",
    "DO_NOT_TRACK": "1",
}


# -- the two workers (each runs in its own subprocess) ------------------------------------------------------


# over 60 lines: both arms are written out step by step so that they can be read side by side
def run_ours(spec: dict[str, Any]) -> dict[str, Any]:
    """Our trainer on ``spec``; per-step times and rewards from its ``metrics.jsonl``."""
    import train.task as train_task
    from envs.backends.base import SamplingParams
    from train.config_files import load_config
    from train.trainer import train

    if spec["force_length"]:  # the config has no min_tokens: build the environment's sampling with one

        def forced(**kwargs: Any) -> SamplingParams:
            return SamplingParams(**{**kwargs, "min_tokens": spec["tokens"]})

        train_task.SamplingParams = forced  # type: ignore[assignment,misc]
    out_dir = Path(spec["out_dir"]) / "ours"
    rows = spec["prompts_per_step"] * spec["group_size"]
    overrides = [
        f"model.name_or_path={spec['model_dir']}",
        f"seed={spec['seed']}",
        f"max_steps={spec['steps']}",
        "deterministic=false",
        "resume=false",
        f"env.rubric={RUBRIC}",
        f"env.data={DATA}",
        "env.eval_fraction=0",
        f"env.max_total_tokens={spec['tokens'] + 256}",
        f"rollout.prompts_per_step={spec['prompts_per_step']}",
        f"rollout.group_size={spec['group_size']}",
        f"rollout.max_tokens={spec['tokens']}",
        "rollout.temperature=1.0",
        "rollout.top_p=1.0",
        "loss.type=dapo",
        "loss.beta=0",
        "loss.epsilon=0.2",
        "loss.epsilon_high=0.28",
        f"loss.max_completion_length={spec['tokens']}",
        "advantage.scale_rewards=group",
        f"optim.learning_rate={spec['learning_rate']}",
        f"optim.micro_batch_size={min(4, rows)}",
        f"optim.micro_batch_tokens={spec.get('micro_batch_tokens', 0)}",
        f"optim.share_prefix={str(spec.get('share_prefix', False)).lower()}",
        "optim.schedule=constant",
        "optim.warmup_steps=0",
        "optim.max_grad_norm=1.0",
        "optim.weight_decay=0.0",
        *_backend_overrides(spec),
        f"logging.output_dir={out_dir}",
        f"logging.checkpoint_every={spec['steps'] + 1}",
        f"logging.sample_every={spec['steps'] + 1}",
        "logging.wandb_mode=disabled",
        "logging.progress=false",
    ]
    cfg = load_config(BASE_CONFIG, overrides)
    started, cpu_started = time.perf_counter(), _cpu_seconds()
    train(cfg)
    total, cpu = time.perf_counter() - started, _cpu_seconds() - cpu_started
    lines = [json.loads(x) for x in (out_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [r for r in lines if "time/train_s" in r]
    return {
        "step_s": [r["time/wait_s"] + r["time/train_s"] + r["time/sync_s"] for r in steps],
        "generate_s": [r["time/generate_and_score_s"] for r in steps],
        "train_s": [r["time/train_s"] for r in steps],
        "sync_s": [r["time/sync_s"] for r in steps],
        "rewards": [r.get("reward/mean") for r in steps],
        "completion_tokens_mean": [r.get("length/completion_tokens_mean") for r in steps],
        "forwards": [r["train/forwards"] for r in steps],
        "padded_tokens": [r["train/padded_tokens"] for r in steps],
        "total_s_including_load": total,
        "busy_cores": cpu / total,
        "peak_rss_gib": peak_rss_gib(),
    }


def _backend_overrides(spec: dict[str, Any]) -> list[str]:
    """The local backend with its sampling copy's dtype, or (``--colocate``) the colocated vLLM engine."""
    if spec.get("colocate_dtype"):
        return [
            "rollout.backend=vllm_colocate",
            "rollout.inference_dtype=null",
            f"rollout.colocate.dtype={spec['colocate_dtype']}",
        ]
    return [f"rollout.inference_dtype={spec['inference_dtype']}"]


def _cpu_seconds() -> float:
    """User plus system CPU time of this process so far, all its threads together."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_standalone(spec: dict[str, Any]) -> dict[str, Any]:
    """A plain ``generate`` of one step's rows (the same prompts, length and sampling as the trainers'
    first step) in the dtype our trainer samples in: the floor our in-loop generation is compared with."""
    import torch
    from transformers import AutoTokenizer

    from envs.models.loading import load_causal_lm

    tune_host_allocator(TrainConfig())  # as in our trainer's process
    torch.manual_seed(spec["seed"])
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    tokenizer.padding_side = "left"
    model = load_causal_lm(
        spec["model_dir"], dtype=getattr(torch, spec["inference_dtype"]), attn_implementation="sdpa"
    ).eval()
    prompts = [json.loads(x)["prompt"] for x in DATA.read_text().splitlines() if x.strip()]
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
        )
        for p in prompts[: spec["prompts_per_step"]]
        for _ in range(spec["group_size"])
    ]
    inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    length = {"min_new_tokens": spec["tokens"]} if spec["force_length"] else {}
    times, tokens = [], []
    for _ in range(3):  # the first is a warm-up
        started = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(
                **inputs,
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                max_new_tokens=spec["tokens"],
                **length,
            )
        times.append(time.perf_counter() - started)
        new = out[:, inputs["input_ids"].shape[1] :]
        tokens.append(
            int((new != tokenizer.pad_token_id).sum()) if tokenizer.pad_token_id is not None else new.numel()
        )
    return {"generate_s": times[1:], "tokens": tokens[1:], "rows": len(texts)}


def trl_vowel_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """TRL's view of ``rubrics.ready_made.vowel_ratio`` (the reward of our ``toy_vowels`` rubric)."""
    from rubrics.ready_made import vowel_ratio

    return [vowel_ratio(c) for c in completions]


# over 60 lines: both arms are written out step by step so that they can be read side by side
def run_trl(spec: dict[str, Any]) -> dict[str, Any]:
    """TRL's GRPOTrainer on ``spec``; per-step times from callbacks, rewards from its logs."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from envs.models.loading import load_causal_lm

    if spec.get("our_allocator"):  # the allocator settings our trainer applies (the fairness arm)
        tune_host_allocator(TrainConfig())
    torch.manual_seed(spec["seed"])
    prompts = [json.loads(x)["prompt"] for x in DATA.read_text().splitlines() if x.strip()]
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in prompts])
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    model = load_causal_lm(spec["model_dir"], dtype=torch.float32, attn_implementation="sdpa")
    rows = spec["prompts_per_step"] * spec["group_size"]
    micro = min(4, rows)
    generation_kwargs = {"min_new_tokens": spec["tokens"]} if spec["force_length"] else None
    args = GRPOConfig(
        output_dir=str(Path(spec["out_dir"]) / "trl"),
        use_cpu=True,
        bf16=False,
        seed=spec["seed"],
        max_steps=spec["steps"],
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=rows // micro,
        num_generations=spec["group_size"],
        max_completion_length=spec["tokens"],
        generation_kwargs=generation_kwargs,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        loss_type="dapo",
        beta=0.0,
        num_iterations=1,
        epsilon=0.2,
        epsilon_high=0.28,
        scale_rewards="group",
        learning_rate=spec["learning_rate"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        adam_beta1=0.9,
        adam_beta2=0.99,
        weight_decay=0.0,
        max_grad_norm=1.0,
        gradient_checkpointing=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )

    class Clock(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.begin = 0.0
            self.step_s: list[float] = []
            self.logs: list[dict[str, Any]] = []
            self.forwards: list[int] = []
            self.padded_tokens: list[int] = []
            self.generate_s: list[float] = []

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.begin = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.step_s.append(time.perf_counter() - self.begin)
            self.forwards.append(passes["forwards"])
            self.padded_tokens.append(passes["tokens"])
            self.generate_s.append(passes["generate_s"])
            passes.update(forwards=0, tokens=0, generate_s=0.0)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if logs and "reward" in logs:
                self.logs.append(dict(logs))

    clock = Clock()
    passes = _count_training_forwards(model, clock)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[trl_vowel_reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[clock],
    )
    started, cpu_started = time.perf_counter(), _cpu_seconds()
    trainer.train()
    total, cpu = time.perf_counter() - started, _cpu_seconds() - cpu_started
    return {
        "step_s": clock.step_s,
        "rewards": [log.get("reward") for log in clock.logs],
        "completion_tokens_mean": [log.get("completions/mean_length") for log in clock.logs],
        "forwards": clock.forwards,
        "padded_tokens": clock.padded_tokens,
        "generate_s": clock.generate_s,
        "total_s_including_load": total,
        "busy_cores": cpu / total,
        "peak_rss_gib": peak_rss_gib(),
    }


def _count_training_forwards(model: Any, clock: Any) -> dict[str, Any]:
    """Count the model's forward calls outside ``generate`` (the loss's, and any old-logprobs or reference
    pass) and the token positions they run over; the step's callback reads and resets the counts."""
    passes: dict[str, Any] = {"forwards": 0, "tokens": 0, "generating": 0, "generate_s": 0.0}
    generate = model.generate

    def counted_generate(*args: Any, **kwargs: Any) -> Any:
        passes["generating"] += 1
        began = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            passes["generating"] -= 1
            passes["generate_s"] += time.perf_counter() - began

    def before_forward(module: Any, args: Any, kwargs: Any) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if not passes["generating"]:
            passes["forwards"] += 1
            passes["tokens"] += int(ids.numel()) if ids is not None else 0

    model.generate = counted_generate
    model.register_forward_pre_hook(before_forward, with_kwargs=True)
    return passes


# -- the driver ---------------------------------------------------------------------------------------------


def in_subprocess(kind: str, spec: dict[str, Any], work: Path, tag: str = "") -> dict[str, Any]:
    spec_path = work / f"{kind}{tag}-{spec['model']}-spec.json"
    result_path = work / f"{kind}{tag}-{spec['model']}-result.json"
    spec_path.write_text(json.dumps(spec))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, str(spec_path), str(result_path)]
    load_before = os.getloadavg()[0]
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **OFFLINE_ENV}, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} on {spec['model']} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    result = dict(json.loads(result_path.read_text()))
    # Load average of the machine (1 min) before and after: above ~the core count, something else shared
    # the cores and the times are inflated.
    result["loadavg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    return result


def _mean(values: list[Any]) -> float | None:
    clean = [float(v) for v in values if v is not None]
    return round(statistics.fmean(clean), 4) if clean else None


def summarise(
    ours: dict[str, Any], trl: dict[str, Any], standalone: dict[str, Any], rows: int, last: int
) -> dict[str, Any]:
    def steady(values: list[float]) -> list[float]:
        return values[1:] or values  # the first step is a warm-up

    def completion_tokens(result: dict[str, Any]) -> list[float]:  # per step, all rows
        return [rows * float(n or 0) for n in result["completion_tokens_mean"]]

    # The median resists steps slowed by other work on a shared machine; the mean is reported beside it.
    ours_s, trl_s = statistics.median(steady(ours["step_s"])), statistics.median(steady(trl["step_s"]))
    split = {
        key: round(statistics.median(steady(ours[key])), 3) for key in ("generate_s", "train_s", "sync_s")
    }
    ours_gen_tps = statistics.median(
        steady([n / s for n, s in zip(completion_tokens(ours), ours["generate_s"], strict=True) if s > 0])
    )
    standalone_tps = sum(standalone["tokens"]) / sum(standalone["generate_s"])
    return {
        "ours_s_per_step": round(ours_s, 3),
        "trl_s_per_step": round(trl_s, 3),
        "speedup": round(trl_s / ours_s, 3),
        "ours_mean_s_per_step": round(statistics.fmean(steady(ours["step_s"])), 3),
        "trl_mean_s_per_step": round(statistics.fmean(steady(trl["step_s"])), 3),
        "ours_loadavg_1m_before_after": ours["loadavg_1m"],
        "trl_loadavg_1m_before_after": trl["loadavg_1m"],
        "ours_last_reward": _mean(ours["rewards"][-last:]),
        "trl_last_reward": _mean(trl["rewards"][-last:]),
        "ours_first_reward": _mean(ours["rewards"][:1]),
        "trl_first_reward": _mean(trl["rewards"][:1]),
        "last_steps_averaged": last,
        "ours_step_split_s": split,
        # TRL's step: its ``generate`` calls, and the rest (scoring, the training passes, the optimiser)
        "trl_step_split_s": _trl_split(trl, steady),
        # CPU seconds over wall seconds of the whole training call (loading excluded): how many of the
        # machine's cores each trainer kept busy on average.
        "ours_busy_cores": round(ours["busy_cores"], 2),
        "trl_busy_cores": round(trl["busy_cores"], 2),
        "cores": os.cpu_count(),
        # completion tokens per second: ours in its generation phase (generation and scoring), a standalone
        # generate of the same rows, and both trainers over their whole step
        "ours_generation_tokens_per_s": round(ours_gen_tps, 1),
        "standalone_generate_tokens_per_s": round(standalone_tps, 1),
        "standalone_over_ours_generation": round(standalone_tps / ours_gen_tps, 3),
        "ours_step_tokens_per_s": round(statistics.median(steady(completion_tokens(ours))) / ours_s, 1),
        "trl_step_tokens_per_s": round(statistics.median(steady(completion_tokens(trl))) / trl_s, 1),
        # the work of the training passes, whatever the hardware: model forward calls per step outside
        # generation, and the token positions they ran over, padding included (medians over the steps)
        "ours_forwards_per_step": statistics.median(ours["forwards"]),
        "trl_forwards_per_step": statistics.median(trl["forwards"]),
        "ours_padded_tokens_per_step": statistics.median(ours["padded_tokens"]),
        "trl_padded_tokens_per_step": statistics.median(trl["padded_tokens"]),
        "ours_peak_rss_gib": round(ours["peak_rss_gib"], 2),
        "trl_peak_rss_gib": round(trl["peak_rss_gib"], 2),
        "ours_total_s_including_load": round(ours["total_s_including_load"], 1),
        "trl_total_s_including_load": round(trl["total_s_including_load"], 1),
        "ours_step_s": [round(x, 3) for x in ours["step_s"]],
        "trl_step_s": [round(x, 3) for x in trl["step_s"]],
        "ours_rewards": [None if r is None else round(r, 4) for r in ours["rewards"]],
        "trl_rewards": [None if r is None else round(r, 4) for r in trl["rewards"]],
        "ours_completion_tokens_mean": ours["completion_tokens_mean"][-1:],
        "trl_completion_tokens_mean": trl["completion_tokens_mean"][-1:],
    }


def _trl_split(trl: dict[str, Any], steady: Any) -> dict[str, float]:
    generate = statistics.median(steady(trl["generate_s"]))
    rest = statistics.median(steady([s - g for s, g in zip(trl["step_s"], trl["generate_s"], strict=True)]))
    return {"generate_s": round(generate, 3), "rest_s": round(rest, 3)}


def another_arm(ours: dict[str, Any], trl: dict[str, Any], rows: int, last: int) -> dict[str, Any]:
    """A further arm of ours (``optim.micro_batch_tokens``, ``optim.share_prefix``), against TRL's run of the
    same model: seconds per step and, since free-length completions differ between runs, completion tokens
    per second of the whole step."""
    s = statistics.median(ours["step_s"][1:] or ours["step_s"])
    trl_s = statistics.median(trl["step_s"][1:] or trl["step_s"])

    def tokens_per_s(result: dict[str, Any], seconds: float) -> float:
        per_step = [rows * float(n or 0) for n in result["completion_tokens_mean"]]
        return statistics.median(per_step[1:] or per_step) / seconds

    ours_tps, trl_tps = tokens_per_s(ours, s), tokens_per_s(trl, trl_s)
    return {
        "s_per_step": round(s, 3),
        "speedup": round(trl_s / s, 3),
        "step_tokens_per_s": round(ours_tps, 1),
        "step_tokens_per_s_over_trl": round(ours_tps / trl_tps, 3),
        "train_s": round(statistics.median(ours["train_s"][1:] or ours["train_s"]), 3),
        "forwards_per_step": statistics.median(ours["forwards"]),
        "padded_tokens_per_step": statistics.median(ours["padded_tokens"]),
        "last_reward": _mean(ours["rewards"][-last:]),
        "peak_rss_gib": round(ours["peak_rss_gib"], 2),
        "loadavg_1m_before_after": ours["loadavg_1m"],
        "step_s": [round(x, 3) for x in ours["step_s"]],
        "completion_tokens_mean": ours["completion_tokens_mean"],
    }


def bench_model(model: str, args: argparse.Namespace, work: Path, rows: int) -> dict[str, Any]:
    """Ours, TRL, the standalone generate (and TRL with our allocator setting, when asked) on ``model``."""
    if model == "tiny":
        from envs.models.tiny import build_tiny_model

        model_dir = build_tiny_model(work / "tiny-model")
        steps, lr = args.steps_tiny, args.lr_tiny
    else:
        from envs.models import prepare_smollm2

        model_dir = prepare_smollm2()
        steps, lr = args.steps_smollm2, args.lr_smollm2
    spec = {
        "model": model,
        "model_dir": str(model_dir),
        "steps": steps,
        "learning_rate": lr,
        "tokens": args.tokens,
        "prompts_per_step": args.prompts_per_step,
        "group_size": args.group_size,
        "seed": args.seed,
        "force_length": not args.free_length,
        "inference_dtype": args.inference_dtype,
        "out_dir": str(work / model),
    }
    last = max(1, steps // 4)
    ours = in_subprocess("ours", spec, work)
    trl = in_subprocess("trl", spec, work)
    standalone = in_subprocess("standalone", spec, work)
    result = {"steps": steps, "learning_rate": lr, **summarise(ours, trl, standalone, rows, last)}
    if args.micro_batch_tokens:  # our trainer again, its micro-batches grouped by length under a token budget
        arm = {**spec, "micro_batch_tokens": args.micro_batch_tokens, "out_dir": str(work / f"{model}-mbt")}
        budget = in_subprocess("ours", arm, work, tag="-mbt")
        result["micro_batch_tokens"] = {
            "budget_tokens": args.micro_batch_tokens,
            **another_arm(budget, trl, rows, last),
        }
    if args.share_prefix:  # our trainer again, each group's prompt run once per micro-batch
        arm = {**spec, "share_prefix": True, "out_dir": str(work / f"{model}-share")}
        result["share_prefix"] = another_arm(in_subprocess("ours", arm, work, tag="-share"), trl, rows, last)
    for dtype in filter(
        None, args.colocate.split(",")
    ):  # our trainer again, sampling with the colocated engine
        arm = {**spec, "colocate_dtype": dtype, "out_dir": str(work / f"{model}-colocate-{dtype}")}
        result[f"colocate_{dtype}"] = another_arm(
            in_subprocess("ours", arm, work, tag=f"-colocate-{dtype}"), trl, rows, last
        )
    if args.trl_our_allocator:  # how much of the speedup is the allocator settings alone
        fair = in_subprocess("trl", {**spec, "our_allocator": True}, work, tag="-allocator")
        fair_s = statistics.median(fair["step_s"][1:] or fair["step_s"])
        result["trl_our_allocator"] = {
            "s_per_step": round(fair_s, 3),
            "speedup_ours_over_it": round(fair_s / result["ours_s_per_step"], 3),
            "peak_rss_gib": round(fair["peak_rss_gib"], 2),
            "last_reward": _mean(fair["rewards"][-last:]),
            "step_s": [round(x, 3) for x in fair["step_s"]],
        }
    return result


# over 60 lines: the benchmark's whole procedure (flags, both arms, the JSON it prints) in order
def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default="tiny,smollm2", help="comma-separated: tiny, smollm2")
    parser.add_argument("--steps-tiny", type=int, default=20)
    parser.add_argument("--steps-smollm2", type=int, default=8)
    parser.add_argument("--lr-tiny", type=float, default=1e-3)
    parser.add_argument("--lr-smollm2", type=float, default=5e-5)
    parser.add_argument(
        "--tokens", type=int, default=96, help="completion length (forced unless --free-length)"
    )
    parser.add_argument("--prompts-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--free-length", action="store_true", help="let completions stop at end-of-sequence")
    parser.add_argument(
        "--micro-batch-tokens",
        type=int,
        default=0,
        help="also run ours with optim.micro_batch_tokens at this budget (at least --tokens + 256)",
    )
    parser.add_argument(
        "--share-prefix",
        action="store_true",
        help="also run ours with optim.share_prefix (each group's prompt run once per micro-batch)",
    )
    parser.add_argument(
        "--inference-dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16"],
        help="our local backend's sampling copy (training stays float32 for both)",
    )
    parser.add_argument(
        "--colocate",
        default="",
        help="also run ours through the colocated vLLM engine in these dtypes (comma-separated: float32,bfloat16)",
    )
    parser.add_argument(
        "--trl-our-allocator",
        "--trl-reuse-freed-memory",  # its name before the single arena joined it
        dest="trl_our_allocator",
        action="store_true",
        help="also run TRL with the allocator settings our trainer applies (train.distributed.tune_host_allocator)",
    )
    parser.add_argument("--worker", nargs=3, metavar=("KIND", "SPEC", "RESULT"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:  # a subprocess: run one trainer, write its result
        kind, spec_path, result_path = args.worker
        spec = json.loads(Path(spec_path).read_text())
        runner = {"ours": run_ours, "trl": run_trl, "standalone": run_standalone}[kind]
        result = runner(spec)
        Path(result_path).write_text(json.dumps(result))
        return

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = set(models) - {"tiny", "smollm2"}
    if unknown:
        parser.error(f"--models: unknown {sorted(unknown)}")
    if args.inference_dtype == "auto":  # as the trainer resolves it on this machine (None: the policy itself)
        from train.distributed import resolve_inference_dtype

        args.inference_dtype = resolve_inference_dtype("auto") or "float32"
    rows = args.prompts_per_step * args.group_size
    if 0 < args.micro_batch_tokens < args.tokens + 256:
        parser.error("--micro-batch-tokens: at least --tokens + 256 (env.max_total_tokens of the run)")
    if rows > 4 and rows % 4:
        parser.error("--prompts-per-step x --group-size must be a multiple of 4 (micro-batches of 4)")
    report: dict[str, Any] = {
        "settings": {
            "prompts_per_step": args.prompts_per_step,
            "group_size": args.group_size,
            "completion_tokens": args.tokens,
            "forced_length": not args.free_length,
            "loss": "dapo, beta 0, num_iterations 1, epsilon 0.2/0.28",
            "temperature": 1.0,
            "torch_threads": os.cpu_count(),
            "reward": RUBRIC,
            "ours_inference_dtype": args.inference_dtype,
            "ours_micro_batch_tokens": args.micro_batch_tokens,
        }
    }
    with tempfile.TemporaryDirectory(prefix="trainer_vs_trl-") as tmp:
        for model in models:
            report[model] = bench_model(model, args, Path(tmp), rows)
            print(f"{model}: {json.dumps(report[model])}", file=sys.stderr, flush=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
