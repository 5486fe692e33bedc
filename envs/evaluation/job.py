"""The ``rubric-grpo eval`` job: a multi-step rubric, its scenarios, a model, a backend, a report."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.backends.base import InferenceBackend, SamplingParams
from envs.datasets import split
from envs.evaluation.run import run_eval
from envs.evaluation.summary import EvalSummary, format_summary, plot_summary
from envs.multistep_env import DEFAULT_SYSTEM_PROMPT, MultiStepMultiTurnEnv
from rubrics.multistep.io import load_rubric, load_scenarios


@dataclass
class EvalJob:
    """Everything ``rubric-grpo eval`` needs."""

    rubric: str
    """Multi-step rubric YAML."""
    scenarios: str
    """Scenario YAML/JSONL."""
    model: str = "smollm2"
    """``smollm2`` or a local model folder."""
    backend: str = "local"
    """``local`` (transformers in this process) or ``vllm`` (``vllm_urls``)."""
    vllm_urls: list[str] = field(default_factory=list)
    """Root URLs of running vLLM servers (backend ``vllm``)."""
    n: int = 4
    """Rollouts per scenario."""
    split: str = "all"
    """Which scenarios: ``all`` (the whole file), or of a seeded split of it, ``eval`` (the held-out share)
    or ``train`` (the rest)."""
    eval_fraction: float = 0.25
    """Share of scenarios held out by the split (``split`` ``eval`` or ``train``)."""
    seed: int = 0
    """Split and sampling seed."""
    temperature: float = 1.0
    """Sampling temperature."""
    max_tokens: int = 128
    """Tokens per reply."""
    max_turns: int = 6
    """Replies per rollout."""
    max_total_tokens: int = 2048
    """Token budget per rollout."""
    judge: str | None = None
    """Override the rubric's default judge (e.g. ``llm``)."""
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    """The policy's system prompt."""
    out: str = "runs/eval"
    """Output folder: rollouts.jsonl, summary.json, eval.png."""
    concurrency: int = 8
    """Scenario groups in flight at once."""


def job_backend(job: EvalJob, model_dir: Path) -> tuple[InferenceBackend, Any]:
    """The backend and the tokenizer for a job."""
    from transformers import AutoTokenizer

    if job.backend == "local":
        from envs.backends.local import LocalBackend

        local = LocalBackend.from_pretrained(str(model_dir))
        return local, local.tokenizer
    if job.backend == "vllm":
        if not job.vllm_urls:
            raise ValueError("backend 'vllm' needs at least one --vllm-url")
        from envs.backends.vllm import VllmBackend

        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        return VllmBackend(job.vllm_urls, str(model_dir)), tokenizer
    raise ValueError(f"backend must be 'local' or 'vllm', got {job.backend!r}")


async def run_job(job: EvalJob, progress: bool = True) -> EvalSummary:
    """Run the evaluation and write its report; returns the summary."""
    from envs.models import resolve_model

    out = Path(job.out)
    out.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (once, before any rollout starts)
    rubric = load_rubric(job.rubric)
    if job.judge is not None:
        if job.judge not in rubric.judges:
            raise ValueError(f"--judge {job.judge!r}: the rubric's judges are {', '.join(rubric.judges)}")
        rubric.default_judge = job.judge
    scenarios = load_scenarios(job.scenarios, rubric)
    train, held = split(scenarios, job.eval_fraction, job.seed)
    chosen = {"eval": held, "train": train, "all": scenarios}[job.split]
    model_dir = resolve_model(job.model)
    backend, tokenizer = job_backend(job, model_dir)
    sampling = SamplingParams(temperature=job.temperature, max_tokens=job.max_tokens, seed=None)
    env = MultiStepMultiTurnEnv(
        rubric,
        chosen,
        tokenizer,
        system_prompt=job.system_prompt,
        sampling=sampling,
        max_turns=job.max_turns,
        max_total_tokens=job.max_total_tokens,
    )
    try:
        summary, states = await run_eval(
            env, backend, env.dataset, job.n, out / "rollouts.jsonl", job.concurrency, progress
        )
    finally:
        await backend.close()
    (out / "summary.json").write_text(
        json.dumps({"job": job.__dict__, **summary.as_dict()}, indent=2, default=str)
    )
    plot_summary(summary, states, out / "eval.png")
    print(format_summary(summary))
    print(
        f"\nrollouts: {out / 'rollouts.jsonl'}\nsummary:  {out / 'summary.json'}\nplot:     {out / 'eval.png'}"
    )
    return summary
