"""The ``rubric-grpo eval`` job: an environment (``EnvConfig``), a model, a backend, a report.

The environment and the backend are built as the trainer builds its own (``envs.build``); the job adds only
what an evaluation needs beyond them: which scenarios, how many rollouts, how to sample, where to write.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from envs.backends.base import SamplingParams
from envs.build import check_env_inputs, make_backend, make_env
from envs.config import EnvConfig
from envs.environment import Environment
from envs.evaluation.result import EvalFolder
from envs.evaluation.resumable import Resume, begin, end, fingerprint
from envs.evaluation.run import run_eval
from envs.evaluation.summary import EvalSummary, format_summary, plot_summary
from envs.rollout import ScoredRollout

ENV_FLAGS = {
    "rubric": "rubric",
    "scenarios": "scenarios",
    "judge": "judge",
    "eval_fraction": "eval_fraction",
    "seed": "split_seed",
    "system_prompt": "system_prompt",
    "max_turns": "max_turns",
    "max_total_tokens": "max_total_tokens",
    "criteria": "data",
    "format": "format",
    "data_split": "data_split",
    "grader": "grader",
    "judge_base_url": "judge_base_url",
    "judge_model": "judge_model",
}
"""``rubric-grpo eval``'s flags that set the environment, and the ``EnvConfig`` field each sets."""
_FLAG_OF = {env_field: "--" + flag.replace("_", "-") for flag, env_field in ENV_FLAGS.items()}


@dataclass
class EvalJob:
    """Everything ``rubric-grpo eval`` needs: the environment, and what the evaluation adds to it."""

    env: EnvConfig
    """The rubric, the scenarios and their split, the judge, the system prompt, the turn and token limits."""
    model: str = "smollm2"
    """``smollm2`` or a local model folder."""
    backend: str = "local"
    """``local`` (transformers in this process), ``vllm_colocate`` (a vLLM engine in this process) or
    ``vllm`` (``vllm_urls``)."""
    vllm_urls: list[str] = field(default_factory=list)
    """Root URLs of running vLLM servers (backend ``vllm``)."""
    n: int = 4
    """Rollouts per scenario."""
    split: str = "all"
    """Which scenarios: ``all`` (the whole file), or of the seeded split ``env.eval_fraction`` and
    ``env.split_seed`` make, ``eval`` (the held-out share) or ``train`` (the rest)."""
    temperature: float = 1.0
    """Sampling temperature."""
    max_tokens: int = 128
    """Tokens per reply."""
    out: str = "runs/eval"
    """Output folder: rollouts.jsonl, summary.json, eval.png."""
    concurrency: int = 8
    """Scenario groups in flight at once."""
    fresh: bool = False
    """Start over in ``out``, discarding the results there, instead of resuming after them."""

    @classmethod
    def from_flags(cls, flags: Mapping[str, Any]) -> EvalJob:
        """The job ``rubric-grpo eval``'s flags describe (None: the default); an evaluation plays 6 turns in
        2,048 tokens unless told otherwise.

        Raises:
            ValueError: a flag's value is out of range, as ``--flag: what is wrong``."""
        given = {k: v for k, v in flags.items() if v is not None}
        env: dict[str, Any] = {"max_turns": 6, "max_total_tokens": 2048}
        env.update({ENV_FLAGS[k]: v for k, v in given.items() if k in ENV_FLAGS})
        if "criteria" in given:
            if "rubric" in given or "scenarios" in given:
                raise ValueError("--criteria: give either --criteria or --rubric with --scenarios, not both")
            env["type"] = "criteria"
        elif "rubric" not in given or "scenarios" not in given:
            raise ValueError("--rubric: give --rubric with --scenarios (a multi-step rubric), or --criteria")
        try:
            env_config = EnvConfig(**env)
        except ValidationError as exc:  # one line naming the flags, as the command's other errors do
            raise ValueError(
                "; ".join(f"{_FLAG_OF[str(e['loc'][0])]}: {e['msg']}" for e in exc.errors())
            ) from None
        job = {k: v for k, v in given.items() if k in cls.__dataclass_fields__ and k != "env"}
        return cls(env=env_config, **job)


RUNTIME_ENV_FIELDS = {
    "judge_base_url",
    "judge_concurrency",
    "judge_timeout_s",
    "judge_max_attempts",
    "judge_api_key_env",
}
"""``EnvConfig`` fields that say where the judge is and how hard to press it, not what it judges: a resumed
evaluation may change them (a judge served again on another port)."""


def resume_settings(job: EvalJob, env_config: EnvConfig, model_dir: Path) -> dict[str, Any]:
    """What the results of ``job`` depend on, recorded in its folder and compared when it resumes: the
    environment's settings (its input files by content, not path), the model (its folder and the size of
    each of its files), the rollouts per example, the split and the sampling."""
    inputs = env_config.input_files()
    paths = {name.removeprefix("env.").split(".")[0] for name, _, _ in inputs}
    return {
        "env": env_config.model_dump(exclude=RUNTIME_ENV_FIELDS | paths),
        "inputs": {name: fingerprint(path) for name, path, _ in inputs},
        "model": {
            "path": str(model_dir.resolve()),
            "files": {p.name: p.stat().st_size for p in sorted(model_dir.iterdir()) if p.is_file()},
        },
        "n": job.n,
        "split": job.split,
        "temperature": job.temperature,
        "max_tokens": job.max_tokens,
    }


async def run_job(job: EvalJob, progress: bool = True) -> EvalSummary:
    """Run the evaluation and write its report; returns the summary. A rerun on the same ``job.out`` resumes
    after the examples done there (``envs.evaluation.resumable``), or starts over with ``job.fresh``."""
    from envs.models import resolve_model

    out = EvalFolder(Path(job.out))
    out.path.mkdir(parents=True, exist_ok=True)
    env_config = job.env if job.split != "all" else job.env.model_copy(update={"eval_fraction": 0.0})
    _check_inputs(env_config)  # every file read and checked before the model loads
    model_dir = resolve_model(job.model)
    if job.backend == "vllm" and not job.vllm_urls:
        raise ValueError("backend 'vllm' needs at least one --vllm-url")
    resume = begin(out, resume_settings(job, env_config, model_dir), job.n, job.fresh) or Resume()
    colocate = {"max_model_len": job.env.max_total_tokens} if job.backend == "vllm_colocate" else None
    backend, tokenizer = make_backend(job.backend, model_dir, vllm_urls=job.vllm_urls, colocate=colocate)
    try:
        sampling = SamplingParams(temperature=job.temperature, max_tokens=job.max_tokens, seed=None)
        env, train, held = make_env(env_config, tokenizer, sampling)
        chosen = held if job.split == "eval" else train  # ``all``: nothing is held out
        if resume.rollouts or resume.dropped_bytes or resume.retried:
            print(_resuming(out, resume, len(chosen), job.n), file=sys.stderr)
        summary, rollouts = await run_eval(
            env, backend, chosen, job.n, out.rollouts, job.concurrency, progress, resume
        )
    finally:
        await backend.close()
    end(out, summary.wall_s)
    _write_report(job, out, env, summary, rollouts)
    return summary


def _check_inputs(env_config: EnvConfig) -> None:
    """``check_env_inputs``, a setting's error naming its flag: ``env.judge: what`` is ``--judge: what``."""
    try:
        check_env_inputs(env_config)
    except ValueError as exc:
        field, _, what = str(exc).partition(": ")
        if field.startswith("env.") and field[4:] in _FLAG_OF:
            raise ValueError(f"{_FLAG_OF[field[4:]]}: {what}") from None
        raise


def _resuming(out: EvalFolder, resume: Resume, examples: int, n: int) -> str:
    """The line that says what a resumed evaluation found in its folder."""
    line = f"resuming {out.path}: {len(resume.rollouts) // n} of {examples} examples already done"
    if resume.dropped_bytes:
        line += f"; cut off a torn tail of {resume.dropped_bytes} bytes (a group a stop left unfinished)"
    if resume.retried:
        line += f"; {resume.retried} examples with an errored rollout are played again"
    return line


def _write_report(
    job: EvalJob, out: EvalFolder, env: Environment, summary: EvalSummary, rollouts: list[ScoredRollout]
) -> None:
    """``summary.json``, the plot and the environment's sections (per-tag scores), printed and written."""
    out.summary.write_text(
        json.dumps(
            {
                "job": {**job.__dict__, "env": job.env.model_dump()},
                **summary.as_dict(),
                **env.summary_metrics(rollouts),
            },
            indent=2,
            default=str,
        )
    )
    plot_summary(summary, rollouts, out.plot)
    print(format_summary(summary))
    extra = env.report_sections({"model": rollouts})
    if extra:  # e.g. per-tag scores of a criteria dataset
        print("\n" + "\n".join(extra))
        out.report.write_text("\n".join(extra) + "\n", encoding="utf-8")
    print(f"\nrollouts: {out.rollouts}\nsummary:  {out.summary}\nplot:     {out.plot}")
