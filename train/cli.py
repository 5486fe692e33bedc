"""The ``rubric-grpo`` command. Each subcommand imports its heavy modules only when it runs."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TypeAlias


def _score(args: argparse.Namespace) -> int:
    from rubrics.batch import InputError, import_rubric, read_states, score_states
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


def _rubric_validate(args: argparse.Namespace) -> int:
    from rubrics.loading import FileLoadError
    from rubrics.multistep.io import load_rubric, load_scenarios

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


def _rubric_show(args: argparse.Namespace) -> int:
    from rubrics.multistep.io import RubricFileError, load_rubric
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


def _rubric_probe(args: argparse.Namespace) -> int:
    from rubrics.multistep.io import RubricFileError, load_rubric, load_scenarios
    from rubrics.multistep.probe import format_table, ideal_demonstrations, probe

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


def _eval(args: argparse.Namespace) -> int:
    from envs.evaluation.job import EvalJob, run_job
    from rubrics.multistep.io import RubricFileError

    if args.split is None and args.eval_fraction is not None:  # a held-out share asks for the split
        args.split = "eval"
    try:
        asyncio.run(run_job(EvalJob.from_flags(vars(args)), progress=not args.no_progress))
    except (RubricFileError, ValueError) as exc:
        print(f"rubric-grpo eval: {exc}", file=sys.stderr)
        return 2
    return 0


def _serve(args: argparse.Namespace) -> int:
    from envs.models import ModelNotAvailableError, resolve_model
    from envs.serving.launch import serve

    try:
        model = resolve_model(args.model)
    except ModelNotAvailableError as exc:
        print(f"rubric-grpo serve: {exc}", file=sys.stderr)
        return 2
    vllm_args = _serve_options_after_model(args)
    return serve(
        model,
        host=args.host,
        port=args.port,
        extra_args=vllm_args,
        max_model_len=args.max_model_len,
        lora_rank=args.lora_rank,
    )


def _serve_options_after_model(args: argparse.Namespace) -> list[str]:
    """Set on ``args`` the serve options written after MODEL (``serve smollm2 --port 8001``: argparse's
    REMAINDER takes every word after MODEL); returns the flags for ``vllm serve``: the words after ``--``
    and those that are not serve options."""
    words = list(args.vllm_args)
    cut = words.index("--") if "--" in words else len(words)
    options = argparse.ArgumentParser(add_help=False)
    _serve_options(options)
    _, unknown = options.parse_known_args(words[:cut], namespace=args)
    return [*unknown, *words[cut + 1 :]]


def _serve_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="port (default %(default)s)")
    parser.add_argument("--max-model-len", type=int, help="context length (default: min(4096, the model's))")
    parser.add_argument(
        "--lora-rank",
        type=int,
        metavar="R",
        help="serve the base model of a LoRA run with model.lora.r = R (loads its adapters at run time)",
    )


def _synth(args: argparse.Namespace) -> int:
    from envs.synth.cli import main as synth_main

    return synth_main(args)


def _gui(args: argparse.Namespace) -> int:
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
    from train.memory_check import MemoryPlanError
    from train.trainer import train

    try:
        train(cfg)
    except (VersionError, MemoryPlanError) as exc:  # the memory plan refuses before any model loads
        print(f"train: {exc}", file=sys.stderr)
        return 2
    return 0


def _train(args: argparse.Namespace) -> int:
    return run_train(args.config, args.overrides)


def _plan(args: argparse.Namespace) -> int:
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


_Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"  # what add_subparsers returns


def build_parser() -> argparse.ArgumentParser:
    """The ``rubric-grpo`` parser: one subcommand per ``_add_*`` below."""
    parser = argparse.ArgumentParser(prog="rubric-grpo", description="GRPO training with rubric rewards.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command")
    for add in (_add_train, _add_plan, _add_score, _add_rubric, _add_eval, _add_serve, _add_synth, _add_gui):
        add(sub)
    return parser


def _add_train(sub: _Subcommands) -> None:
    tr = sub.add_parser("train", help="train a policy (the same as python -m train CONFIG [overrides])")
    tr.add_argument("config", help="run config YAML (configs/train/)")
    tr.add_argument("overrides", nargs="*", help="section.field=value, e.g. max_steps=3")
    tr.set_defaults(handler=_train)


def _add_plan(sub: _Subcommands) -> None:
    plan = sub.add_parser(
        "plan", help="a run's memory per process, from its config and config.json (no weights)"
    )
    plan.add_argument("config", help="run config YAML (configs/train/)")
    plan.add_argument("overrides", nargs="*", help="section.field=value, e.g. optim.micro_batch_size=1")
    plan.add_argument(
        "--gpu-memory", type=float, help="GiB of the GPU (default: this host's); exit 1 if no fit"
    )
    plan.add_argument("--processes", type=int, default=1, help="processes of the launch (default 1)")
    plan.add_argument("--zero-stage", type=int, choices=[0, 2, 3], default=0, help="DeepSpeed ZeRO (0: none)")
    plan.add_argument("--model-config", help="the architecture's config.json, when the model is elsewhere")
    plan.set_defaults(handler=_plan)


def _add_score(sub: _Subcommands) -> None:
    score = sub.add_parser("score", help="score a JSONL file of rollouts with a rubric")
    score.add_argument("data", help="JSONL, one state per line; lines sharing 'group' are scored together")
    score.add_argument(
        "--rubric",
        default="rubrics.examples:math_with_format",
        help="module:attribute of a Rubric or a factory (default: %(default)s)",
    )
    score.add_argument("--out", help="write the scored states here (JSONL), group by group")
    score.set_defaults(handler=_score)


def _add_rubric(sub: _Subcommands) -> None:
    rubric = sub.add_parser("rubric", help="validate or show a multi-step rubric file").add_subparsers(
        dest="rubric_command", required=True
    )
    validate = rubric.add_parser("validate", help="check a rubric file (and scenario files against it)")
    validate.add_argument("file", help="rubric YAML")
    validate.add_argument("--scenarios", action="append", default=[], help="scenario YAML/JSONL (repeatable)")
    validate.add_argument(
        "--strict",
        action="store_true",
        help="treat warnings (reveals that are never shown, rules that cannot mean what they seem) as errors",
    )
    validate.set_defaults(handler=_rubric_validate)
    show = rubric.add_parser("show", help="print levels, branches and paths; optionally draw the DAG")
    show.add_argument("file", help="rubric YAML")
    show.add_argument("--svg", help="write an SVG drawing of the DAG here")
    show.set_defaults(handler=_rubric_show)
    probe = rubric.add_parser(
        "probe", help="score the trivial policies a rubric can be gamed by, and the ceiling"
    )
    probe.add_argument("file", help="rubric YAML")
    probe.add_argument("--scenarios", action="append", required=True, help="scenario YAML/JSONL (repeatable)")
    probe.add_argument(
        "--majority-from",
        action="append",
        default=[],
        help="scenarios whose majority answers to assert "
        "(default: those played; a training set, to probe a held-out one)",
    )
    probe.add_argument("--max-turns", type=int, default=6, help="replies per rollout (default %(default)s)")
    probe.add_argument("--json", help="also write the rows here")
    probe.add_argument(
        "--demos", help="also write the ideal policy's conversations here (JSONL, for warm_start)"
    )
    probe.set_defaults(handler=_rubric_probe)


def _add_eval(sub: _Subcommands) -> None:
    ev = sub.add_parser(
        "eval",
        help="run a model on a multi-step rubric's scenarios (--rubric, --scenarios) or on a per-prompt "
        "criteria dataset (--criteria) and summarise",
    )
    ev.add_argument("--rubric", help="multi-step rubric YAML (with --scenarios)")
    ev.add_argument("--scenarios", help="scenario YAML/JSONL (with --rubric)")
    ev.add_argument(
        "--criteria",
        help="a per-prompt criteria dataset instead (JSONL, JSON, parquet or a datasets folder; "
        "docs/criteria_data.md): prints per-tag scores HealthBench's way",
    )
    ev.add_argument("--format", choices=["auto", "native", "healthbench", "rar"], help="--criteria's format")
    ev.add_argument("--data-split", help="--criteria: the split of a datasets folder")
    ev.add_argument("--grader", choices=["per_criterion", "one_shot", "holistic"], help="LLM autograder")
    ev.add_argument("--judge-base-url", help="--criteria: the LLM judge's endpoint (criteria without a rule)")
    ev.add_argument("--judge-model", help="--criteria: the LLM judge's model name")
    ev.add_argument("--model", help="'smollm2' (default) or a local model folder")
    ev.add_argument("--backend", choices=["local", "vllm"], help="inference backend (default local)")
    ev.add_argument("--vllm-url", dest="vllm_urls", action="append", help="vLLM server root URL (repeatable)")
    ev.add_argument("--n", type=int, help="rollouts per scenario (default 4)")
    ev.add_argument(
        "--split",
        choices=["eval", "train", "all"],
        help="scenarios to run: all (default: the whole file), or the held-out share (eval) or the rest (train) "
        "of a seeded split",
    )
    ev.add_argument(
        "--eval-fraction", type=float, help="share held out by --split (default 0.25; implies eval)"
    )
    ev.add_argument("--seed", type=int, help="split seed (default 0)")
    ev.add_argument("--temperature", type=float)
    ev.add_argument("--max-tokens", type=int, help="tokens per reply (default 128)")
    ev.add_argument("--max-turns", type=int, help="replies per rollout (default 6)")
    ev.add_argument("--max-total-tokens", type=int, help="token budget per rollout (default 2048)")
    ev.add_argument("--judge", help="use this judge of the rubric by default (e.g. llm)")
    ev.add_argument("--system-prompt", help="the policy's system prompt (default: the environment's)")
    ev.add_argument("--out", help="output folder (default runs/eval)")
    ev.add_argument("--concurrency", type=int, help="scenario groups in flight (default 8)")
    ev.add_argument("--no-progress", action="store_true", help="no progress bar")
    ev.set_defaults(handler=_eval)


def _add_serve(sub: _Subcommands) -> None:
    srv = sub.add_parser("serve", help="start a vLLM server for RL (weight updates, token ids, logprobs)")
    srv.add_argument("model", help="'smollm2' or a local model folder")
    _serve_options(srv)
    srv.add_argument("vllm_args", nargs=argparse.REMAINDER, help="after --: extra flags for vllm serve")
    srv.set_defaults(handler=_serve)


def _add_synth(sub: _Subcommands) -> None:
    syn = sub.add_parser("synth", help="generate validated synthetic scenarios from a multi-step rubric")
    syn.add_argument("rubric", help="multi-step rubric YAML")
    syn.add_argument("--n", type=int, required=True, help="scenarios to plan (dropped ones are reported)")
    syn.add_argument("--out", required=True, help="output folder (an interrupted run resumes there)")
    syn.add_argument("--model", help="endpoint model name, or with --backend local 'smollm2' or a folder")
    syn.add_argument("--base-url", help="OpenAI-compatible endpoint root, e.g. http://127.0.0.1:8000/v1")
    syn.add_argument("--api-key-env", help="name of the environment variable holding the endpoint's key")
    syn.add_argument(
        "--backend", choices=["endpoint", "local"], default="endpoint", help="default %(default)s"
    )
    syn.add_argument("--seed", type=int, default=0, help="plan seed (default %(default)s)")
    syn.add_argument("--concurrency", type=int, default=8, help="items in flight (default %(default)s)")
    syn.add_argument(
        "--weighting", choices=["uniform", "balanced"], default="uniform", help="after covering every branch"
    )
    syn.add_argument(
        "--temperature", type=float, default=0.7, help="sampling temperature (default %(default)s)"
    )
    syn.add_argument("--max-tokens", type=int, default=2048, help="tokens per reply (default %(default)s)")
    syn.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default %(default)s)")
    syn.add_argument("--no-regrade", action="store_true", help="skip validation by re-grading")
    syn.add_argument("--no-progress", action="store_true", help="no progress bar")
    syn.add_argument("--push-to-hub", help="push the splits hidden and scenarios to this dataset repo")
    syn.set_defaults(handler=_synth)


def _add_gui(sub: _Subcommands) -> None:
    gui = sub.add_parser("gui", help="the rubric builder: edit a rubric's DAG, grade a reply, edit scenarios")
    gui.add_argument("file", nargs="?", help="rubric YAML to open (created on first save if missing)")
    gui.add_argument("--dir", help="the only folder the app reads and writes (default: the current one)")
    gui.add_argument("--port", type=int, help="port (default: a free one, printed)")
    gui.add_argument("--host", default="127.0.0.1", help="bind address (default %(default)s)")
    gui.set_defaults(handler=_gui)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from rubrics import __version__

        print(f"rubric-grpo {__version__}")
        return 0
    if not getattr(args, "handler", None):
        parser.print_help()
        return 1
    from envs.models.loading import VersionError

    try:
        return int(args.handler(args))
    except VersionError as exc:  # a too-old torch, transformers or accelerate: one line, before any work
        print(f"rubric-grpo {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
