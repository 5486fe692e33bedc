"""``rubric-grpo synth``: the glue between the command line and ``run_synth`` (``train.commands`` calls
``main``)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from envs.synth.generate import EndpointGenerator, Generator, LocalGenerator
from envs.synth.outputs import push_to_hub
from envs.synth.pipeline import ResumeMismatchError, SynthOptions, run_synth
from envs.synth.report import format_report
from rubrics.multistep.rubric_io import RubricFileError


def make_generator(args: argparse.Namespace) -> Generator:
    """The endpoint (``--base-url`` and ``--model``) or the local backend (``--backend local``)."""
    if args.backend == "local":
        from envs.models import resolve_model

        return LocalGenerator(
            str(resolve_model(args.model or "smollm2")),
            temperature=args.temperature,
            max_tokens=args.max_tokens,
            seed=args.seed,
        )
    if not args.base_url or not args.model:
        raise ValueError("give --base-url and --model for an endpoint, or --backend local")
    return EndpointGenerator(
        args.base_url,
        args.model,
        args.api_key_env,
        concurrency=args.concurrency,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        timeout_s=args.timeout,
    )


def main(args: argparse.Namespace) -> int:
    """Run the pipeline from parsed arguments; print the report; 2 on a usage or file error."""
    try:
        options = SynthOptions(
            n=args.n,
            seed=args.seed,
            weighting=args.weighting,
            concurrency=args.concurrency,
            regrade=not args.no_regrade,
            progress=not args.no_progress,
        )
        generator = make_generator(args)
    except (ValueError, RuntimeError) as exc:  # ModelNotAvailableError is a RuntimeError
        print(f"rubric-grpo synth: {exc}", file=sys.stderr)
        return 2

    async def go() -> dict:
        try:
            return await run_synth(args.rubric, args.out, generator, options)
        finally:
            await generator.close()

    try:
        report = asyncio.run(go())
    except (RubricFileError, ResumeMismatchError, ValueError) as exc:
        print(f"rubric-grpo synth: {exc}", file=sys.stderr)
        return 2
    print(format_report(report))
    print(f"\noutputs in {args.out}")
    if args.push_to_hub:
        try:
            push_to_hub(Path(args.out), args.push_to_hub)
        except RuntimeError as exc:
            print(f"rubric-grpo synth: not pushed: {exc}", file=sys.stderr)
            return 1
        print(f"pushed the splits hidden and scenarios to {args.push_to_hub}")
    return 0
