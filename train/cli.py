"""The ``rubric-grpo`` command line: its parser, one ``_add_*`` per subcommand, and ``main``, which hands the
parsed arguments to the subcommand's function in ``train.commands``."""

from __future__ import annotations

import argparse
import sys
from typing import TypeAlias

from train import commands

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
    tr.set_defaults(handler=commands.train)


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
    plan.set_defaults(handler=commands.plan)


def _add_score(sub: _Subcommands) -> None:
    score = sub.add_parser("score", help="score a JSONL file of rollouts with a rubric")
    score.add_argument("data", help="JSONL, one state per line; lines sharing 'group' are scored together")
    score.add_argument(
        "--rubric",
        default="rubrics.ready_made:math_with_format",
        help="module:attribute of a Rubric or a factory (default: %(default)s)",
    )
    score.add_argument("--out", help="write the scored states here (JSONL), group by group")
    score.set_defaults(handler=commands.score)


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
    validate.set_defaults(handler=commands.rubric_validate)
    show = rubric.add_parser("show", help="print levels, branches and paths; optionally draw the DAG")
    show.add_argument("file", help="rubric YAML")
    show.add_argument("--svg", help="write an SVG drawing of the DAG here")
    show.set_defaults(handler=commands.rubric_show)
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
    probe.set_defaults(handler=commands.rubric_probe)


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
    ev.add_argument(
        "--backend", choices=["local", "vllm", "vllm_colocate"], help="inference backend (default local)"
    )
    ev.add_argument("--vllm-url", dest="vllm_urls", action="append", help="vLLM server root URL (repeatable)")
    ev.add_argument("--n", type=int, help="rollouts per scenario (default 4)")
    ev.add_argument(
        "--split",
        choices=["eval", "train", "all"],
        help="scenarios to run: all (default: the whole file), or the held-out share (eval) or the rest "
        "(train) of a seeded split",
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
    ev.add_argument(
        "--out",
        help="output folder (default runs/eval); run again on the same folder, an evaluation resumes after "
        "the examples already done there",
    )
    ev.add_argument(
        "--fresh", action="store_true", help="start over in --out, discarding the results already there"
    )
    ev.add_argument("--concurrency", type=int, help="scenario groups in flight (default 8)")
    ev.add_argument("--no-progress", action="store_true", help="no progress bar")
    ev.set_defaults(handler=commands.evaluate)


def _add_serve(sub: _Subcommands) -> None:
    srv = sub.add_parser("serve", help="start a vLLM server for RL (weight updates, token ids, logprobs)")
    srv.add_argument("model", help="'smollm2' or a local model folder")
    commands.add_serve_options(srv)
    srv.add_argument("vllm_args", nargs=argparse.REMAINDER, help="after --: extra flags for vllm serve")
    srv.set_defaults(handler=commands.serve)


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
    syn.set_defaults(handler=commands.synth)


def _add_gui(sub: _Subcommands) -> None:
    gui = sub.add_parser("gui", help="the rubric builder: edit a rubric's DAG, grade a reply, edit scenarios")
    gui.add_argument("file", nargs="?", help="rubric YAML to open (created on first save if missing)")
    gui.add_argument("--dir", help="the only folder the app reads and writes (default: the current one)")
    gui.add_argument("--port", type=int, help="port (default: a free one, printed)")
    gui.add_argument("--host", default="127.0.0.1", help="bind address (default %(default)s)")
    gui.set_defaults(handler=commands.gui)


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
