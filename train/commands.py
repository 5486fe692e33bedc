"""What each ``rubric-grpo`` subcommand does, given its parsed arguments (``train.cli`` parses them): each
returns the exit status, and imports its heavy modules only when it runs."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from train.config import TrainConfig


def score(args: argparse.Namespace) -> int:
    """``rubric-grpo score``: score a JSONL file of rollouts with a rubric."""
    from rubrics.score_command import InputError, import_rubric, read_states, score_states
    from rubrics.types import State, plain_state

    try:
        rubric = import_rubric(args.rubric)
        states = read_states(Path(args.data))
    except InputError as exc:
        print(f"rubric-grpo score: {exc}", file=sys.stderr)
        return 2
    out = open(args.out, "w", encoding="utf-8") if args.out else None  # noqa: SIM115

    def write(group: list[State]) -> None:  # each group is saved as soon as it is scored
        if out is not None:
            for state in group:
                out.write(json.dumps(plain_state(state), default=str) + "\n")
            out.flush()

    try:
        summary = asyncio.run(score_states(rubric, states, on_group=write))
    finally:
        if out is not None:
            out.close()
        for child in [rubric, *getattr(rubric, "rubrics", [])]:
            close = getattr(child, "close", None)
            if callable(close):
                close()
    print(json.dumps(summary.as_dict(), indent=2))
    return 0


def rubric_validate(args: argparse.Namespace) -> int:
    """``rubric-grpo rubric validate``: check a rubric file, and scenario files against it."""
    from rubrics.loading import FileLoadError
    from rubrics.multistep.rubric_io import load_rubric, load_scenarios

    warnings: list[FileLoadError] = []
    try:
        rubric = load_rubric(args.file, strict=args.strict, warn=warnings.append)
        scenarios = [
            s
            for f in args.scenarios
            for s in load_scenarios(f, rubric, strict=args.strict, warn=warnings.append)
        ]
    except FileLoadError as exc:  # RubricFileError and every other loader's error
        print(f"rubric-grpo rubric validate: {exc}", file=sys.stderr)
        return 2
    for warning in warnings:
        print(f"rubric-grpo rubric validate: warning: {warning}", file=sys.stderr)
    graph = rubric.graph
    print(
        f"{args.file}: ok: {len(graph.requirements)} requirements, {graph.depth} levels, "
        f"{graph.count_paths()} paths"
        + (f"; {len(scenarios)} scenarios ok" if args.scenarios else "")
        + (f" ({len(warnings)} warnings; --strict refuses them)" if warnings else "")
    )
    return 0


def rubric_show(args: argparse.Namespace) -> int:
    """``rubric-grpo rubric show``: print a rubric's levels, branches and paths; optionally draw it."""
    from rubrics.multistep.rubric_io import RubricFileError, load_rubric
    from rubrics.multistep.show import describe, to_svg

    try:
        rubric = load_rubric(args.file)
    except RubricFileError as exc:
        print(f"rubric-grpo rubric show: {exc}", file=sys.stderr)
        return 2
    print(describe(rubric))
    if args.svg:
        Path(args.svg).write_text(to_svg(rubric), encoding="utf-8")
        print(f"\ndrawing written to {args.svg}")
    return 0


def rubric_probe(args: argparse.Namespace) -> int:
    """``rubric-grpo rubric probe``: score the trivial policies a rubric can be gamed by, and the ceiling."""
    from rubrics.multistep.probe import format_table, ideal_demonstrations, probe
    from rubrics.multistep.rubric_io import RubricFileError, load_rubric, load_scenarios

    try:
        rubric = load_rubric(args.file)
        scenarios = [s for f in args.scenarios for s in load_scenarios(f, rubric)]
        majority_from = [s for f in args.majority_from for s in load_scenarios(f, rubric)] or None
    except RubricFileError as exc:
        print(f"rubric-grpo rubric probe: {exc}", file=sys.stderr)
        return 2
    rows = asyncio.run(probe(rubric, scenarios, args.max_turns, majority_from=majority_from))
    print("\n".join(format_table(rows)))
    if args.json:
        Path(args.json).write_text(json.dumps([r.as_dict() for r in rows], indent=2), encoding="utf-8")
    if args.demos:
        demos = asyncio.run(ideal_demonstrations(rubric, scenarios, args.max_turns))
        Path(args.demos).write_text("".join(json.dumps(d) + "\n" for d in demos), encoding="utf-8")
        print(f"{args.demos}: {len(demos)} demonstrations (warm_start.demonstrations)")
    return 0


def evaluate(args: argparse.Namespace) -> int:
    """``rubric-grpo eval``: run a model on scenarios or a criteria dataset and summarise."""
    from envs.evaluation.job import EvalJob, run_job
    from rubrics.multistep.rubric_io import RubricFileError

    if args.split is None and args.eval_fraction is not None:  # a held-out share asks for the split
        args.split = "eval"
    try:
        asyncio.run(run_job(EvalJob.from_flags(vars(args)), progress=not args.no_progress))
    except (RubricFileError, ValueError) as exc:
        print(f"rubric-grpo eval: {exc}", file=sys.stderr)
        return 2
    return 0


def serve(args: argparse.Namespace) -> int:
    """``rubric-grpo serve``: start a vLLM server for RL."""
    from envs.models import ModelNotAvailableError, resolve_model
    from envs.serving.launch import serve as launch_server

    try:
        model = resolve_model(args.model)
    except ModelNotAvailableError as exc:
        print(f"rubric-grpo serve: {exc}", file=sys.stderr)
        return 2
    vllm_args = serve_options_after_model(args)
    return launch_server(
        model,
        host=args.host,
        port=args.port,
        extra_args=vllm_args,
        max_model_len=args.max_model_len,
        lora_rank=args.lora_rank,
        weight_transfer=args.weight_transfer,
    )


def serve_options_after_model(args: argparse.Namespace) -> list[str]:
    """Set on ``args`` the serve options written after MODEL (``serve smollm2 --port 8001``: argparse's
    REMAINDER takes every word after MODEL); returns the flags for ``vllm serve``: the words after ``--``
    and those that are not serve options."""
    words = list(args.vllm_args)
    cut = words.index("--") if "--" in words else len(words)
    options = argparse.ArgumentParser(add_help=False)
    add_serve_options(options)
    _, unknown = options.parse_known_args(words[:cut], namespace=args)
    return [*unknown, *words[cut + 1 :]]


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    """The options that are ``serve``'s own, not ``vllm serve``'s."""
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="port (default %(default)s)")
    parser.add_argument("--max-model-len", type=int, help="context length (default: min(4096, the model's))")
    parser.add_argument(
        "--lora-rank",
        type=int,
        metavar="R",
        help="serve the base model of a LoRA run with model.lora.r = R (loads its adapters at run time)",
    )
    parser.add_argument(
        "--weight-transfer",
        choices=["nccl"],
        help="also take full weights over vLLM's NCCL transfer engine (rollout.transfer.path 'nccl', a CUDA "
        "host); without it, weights arrive as files",
    )


def synth(args: argparse.Namespace) -> int:
    """``rubric-grpo synth``: generate validated synthetic scenarios (``envs.synth.cli``)."""
    from envs.synth.cli import main as synth_main

    return synth_main(args)


def gui(args: argparse.Namespace) -> int:
    """``rubric-grpo gui``: the rubric builder."""
    from envs.gui.launch import launch, plan

    try:
        target = plan(args.file, args.dir, args.host, args.port)
    except ValueError as exc:
        print(f"rubric-grpo gui: {exc}", file=sys.stderr)
        return 2
    return launch(target)


def run_train(config: str, overrides: list[str]) -> int:
    """``rubric-grpo train`` and ``python -m train``: check the config and every file it names before any
    model loads (each problem one line on stderr, exit 2), then train (exit 0)."""
    from train.config_files import ConfigError, load_config

    try:
        cfg = load_config(config, overrides)  # every field checked before any model is loaded
    except ConfigError as exc:
        print(f"train: {exc}", file=sys.stderr)
        return 2
    from train.preflight import PreflightError, check_inputs

    try:
        check_inputs(cfg, config, overrides)  # every file the config names, before any model is loaded
    except PreflightError as exc:
        print(f"train: {exc}", file=sys.stderr)
        return 2
    from envs.models.loading import VersionError
    from train.checkpoint import ResumeError
    from train.memory_check import MemoryPlanError
    from train.trainer import TooManyFailedRollouts, train

    try:
        train(cfg)
    except (VersionError, MemoryPlanError, ResumeError) as exc:  # each refuses before any model loads
        print(f"train: {exc}", file=sys.stderr)
        return 2
    except TooManyFailedRollouts as exc:  # before the step's update: nothing of the step was saved
        print(f"train: {exc}\ntrain: {_restart_from(cfg)}", file=sys.stderr)
        return 1
    return 0


def _restart_from(cfg: TrainConfig) -> str:
    """Where a stopped run goes on from: its last checkpoint, or the start."""
    from train.checkpoint import latest_checkpoint
    from train.run_folder import RunFolder

    last = latest_checkpoint(RunFolder(Path(cfg.logging.output_dir)))
    if last is None:
        return "no checkpoint was saved; launched again, the run starts over"
    if cfg.resume:
        return f"the last checkpoint, {last}, is whole; the same command resumes from it"
    return f"the last checkpoint, {last}, is whole; launched with resume=true, the run goes on from it"


def train(args: argparse.Namespace) -> int:
    """``rubric-grpo train``: ``run_train``."""
    return run_train(args.config, args.overrides)


def plan(args: argparse.Namespace) -> int:
    """``rubric-grpo plan``: a run's memory per process; exit 1 when it does not fit."""
    from envs.models import ModelNotAvailableError
    from train.config_files import ConfigError, load_config
    from train.memory_check import MemoryPlanError, check_fits, format_table, make_setup, model_config_json
    from train.memory_plan import estimate, read_shapes

    try:
        if args.processes < 1 or (args.gpu_memory is not None and args.gpu_memory <= 0):
            raise ValueError("--processes must be at least 1 and --gpu-memory above 0")
        cfg = load_config(args.config, args.overrides)
        shapes = read_shapes(args.model_config or model_config_json(cfg))
    except (ConfigError, ModelNotAvailableError, ValueError) as exc:
        print(f"rubric-grpo plan: {exc}", file=sys.stderr)
        return 2
    plan = estimate(cfg, shapes, make_setup(cfg, args.processes, args.zero_stage, args.gpu_memory))
    print(format_table(plan))
    try:
        check_fits(cfg, shapes, plan)
    except MemoryPlanError as exc:
        print(f"rubric-grpo plan: {exc}", file=sys.stderr)
        return 1
    return 0
