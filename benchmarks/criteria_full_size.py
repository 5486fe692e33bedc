"""A criteria dataset at full size: loading, the run's preflight and judge-bound scoring of a generated
HealthBench-shaped dataset (5,000 examples, 48,000 criteria by default).

    .venv/bin/python benchmarks/criteria_full_size.py [--examples 5000] [--criteria 48000]
        [--latency 0.05] [--concurrency 64] [--score-examples N] [--out DIR]
        [--stages load,preflight,scoring,resume] [--kill-at 0.5]

The dataset is generated (seeded), never copied: HealthBench's fields (``prompt_id``, ``prompt`` as a
conversation that ends with the user, ``rubrics: [{criterion, points, tags}]`` with some negative points,
``example_tags``, and ``ideal_completions_data.ideal_completion`` on every other example), the criteria
spread unevenly over the examples, the text drawn from a fixed vocabulary. It is written as JSONL and as
parquet (pyarrow, as ``datasets`` writes it), from the same records.

- ``load``: ``load_criteria_examples`` on each file, in a fresh process per file: the seconds it takes and
  its peak RSS (``VmHWM``, see ``_rss_mib``) over the same process's peak after the imports (the loader's,
  and pyarrow's for parquet), beside the file's size; ``kept_mib`` is the RSS still held after the load.
- ``preflight``: ``train.preflight.check_inputs`` on a criteria run config naming the file (what
  ``python -m train`` runs before any model loads: the whole load, the held-out split, the judge check),
  timed and measured the same way, each in its own fresh process.
- ``scoring``: one generated reply per example (the first ``--score-examples``, all by default) graded as a
  criteria run grades it: the grader ``envs.build.criteria_grader`` builds (``RuleFirstGrader`` over
  ``PerCriterionGrader``, one judge call per criterion: HealthBench's criteria carry no rules; at most two
  gradings per judge slot asking at once, ``RuleFirstGrader.max_gradings``) with the
  example's query and reference answer, all rollouts gathered at once, against ``judge_bound.py``'s local
  judge server answering after ``--latency`` seconds, at most ``--concurrency`` calls in flight, after a
  warm-up of one call per connection:

    ideal_s = LLM calls x latency / concurrency     (48,000 x 0.05 / 64 = 37.5 s)
    ratio   = wall_s / ideal_s                      (goal <= 1.1)

- ``resume``: ``rubric-grpo eval``'s job over every example, a fixed reply per example for its policy,
  killed by SIGKILL once ``--kill-at`` of the examples are written and run again on the same folder, against
  the same judge (``benchmarks/eval_resume.py``): the judge calls before and after, and those the second
  session made again for examples already written (the goal: 0).

Prints one JSON object. Goals (issue 51): a load in seconds with a peak a small multiple of the file, and
a ratio within 1.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: this checkout's packages and benchmarks.judge_bound

WORDS = (
    "patient dose symptoms pain fever hours days doctor clinic emergency breathing chest child adult advice "
    "should could would the a of to and in with for not if when after before risk sign care water rest call "
    "medicine allergy blood pressure heart skin rash swelling infection test result treatment follow up"
)
VOCABULARY = WORDS.split()
STAGES = ("load", "preflight", "scoring", "resume")
"""What the benchmark measures, in order (``--stages``)."""
THEMES = ("emergency_referrals", "context_seeking", "global_health", "hedging", "communication")
AXES = ("accuracy", "completeness", "communication_quality", "context_awareness", "instruction_following")


def text(rng: random.Random, words: int) -> str:
    """``words`` words drawn from the vocabulary, as a sentence."""
    return " ".join(rng.choices(VOCABULARY, k=words)).capitalize() + "."


def criteria_counts(examples: int, criteria: int) -> list[int]:
    """How many criteria each example gets: ``criteria`` in all, at least 1 each, unevenly spread (each
    pair of examples moves up to half the mean between them)."""
    base, extra = divmod(criteria, examples)
    counts = [base + (1 if i < extra else 0) for i in range(examples)]
    for pair in range(examples // 2):
        shift = pair % (base // 2 + 1)
        counts[2 * pair] += shift
        counts[2 * pair + 1] -= shift
    if min(counts) < 1:
        raise ValueError(f"{criteria} criteria cannot give each of {examples} examples at least one")
    return counts


def healthbench_record(rng: random.Random, index: int, criteria: int) -> dict[str, Any]:
    """One HealthBench record with ``criteria`` rubric items, about a quarter of them pitfalls."""
    turns = rng.choice((1, 1, 3, 5))
    prompt = [
        {"role": "user" if t % 2 == 0 else "assistant", "content": text(rng, rng.randint(20, 150))}
        for t in range(turns)
    ]
    rubrics = [
        {
            "criterion": text(rng, rng.randint(15, 40)),
            "points": rng.choice((-8, -5, -2, 1, 2, 3, 5, 7, 10)),
            "tags": ["level:example", f"axis:{rng.choice(AXES)}"],
        }
        for _ in range(criteria)
    ]
    rubrics[0]["points"] = abs(rubrics[0]["points"])  # every example can earn something
    record: dict[str, Any] = {
        "prompt_id": f"hb-{index:06d}",
        "prompt": prompt,
        "rubrics": rubrics,
        "example_tags": [f"theme:{rng.choice(THEMES)}"],
    }
    if index % 2 == 0:
        record["ideal_completions_data"] = {
            "ideal_completion": text(rng, rng.randint(100, 300)),
            "ideal_completions_group": "Group 1",
        }
    return record


def write_dataset(folder: Path, examples: int, criteria: int, seed: int) -> dict[str, Path]:
    """The dataset as ``healthbench.jsonl`` and, with pyarrow installed, ``healthbench.parquet``."""
    rng = random.Random(seed)
    records = [healthbench_record(rng, i, n) for i, n in enumerate(criteria_counts(examples, criteria))]
    files = {"jsonl": folder / "healthbench.jsonl"}
    with files["jsonl"].open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record) + "\n")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return files
    files["parquet"] = folder / "healthbench.parquet"
    pq.write_table(pa.Table.from_pylist(records), files["parquet"])
    return files


def _rss_mib() -> tuple[float, float]:
    """This process's (peak, current) resident memory in MiB (Linux ``/proc``: ``VmHWM``, ``VmRSS``).

    Not ``ru_maxrss``: Linux carries the parent's resident memory at the fork into a child's ``ru_maxrss``
    across ``exec``, so a child of this (large) process would start from the parent's peak; ``VmHWM`` is
    the peak of the child's own memory since its ``exec``."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["VmHWM"].split()[0]) / 1024, int(fields["VmRSS"].split()[0]) / 1024


def child(stage: str, path: Path) -> dict[str, Any]:
    """In a fresh process: the imports, then ``stage`` (``load`` or ``preflight``) on ``path``, timed, with
    the peak RSS over the peak after the imports."""
    import envs.build
    import envs.criteria.data
    import train.demonstrations
    import train.preflight
    from train.config_files import load_config

    if path.suffix == ".parquet":
        import pyarrow.parquet  # noqa: F401  (the loader imports it; its memory is not the load's)
    cfg = load_config(None, [*run_overrides(path), "model.name_or_path=smollm2"])
    stages = {
        "load": lambda: len(envs.criteria.data.load_criteria_examples(path)),
        "preflight": lambda: train.preflight.check_inputs(cfg),  # keeps nothing: the run loads again
    }
    peak0, rss0 = _rss_mib()
    start = time.perf_counter()
    count = stages[stage]()
    seconds = time.perf_counter() - start
    peak, rss = _rss_mib()
    return {"seconds": seconds, "peak_mib": peak - peak0, "kept_mib": rss - rss0} | (
        {"examples": count} if count is not None else {}
    )


def run_overrides(path: Path) -> list[str]:
    """A criteria run config's ``env`` naming ``path`` and an LLM judge (HealthBench needs one)."""
    return [
        "env.type=criteria",
        f"env.data={path}",
        "env.judge_base_url=http://127.0.0.1:9/v1",
        "env.judge_model=judge",
    ]


def measure(stage: str, path: Path) -> dict[str, Any]:
    """``child(stage, path)`` in a fresh interpreter, with the file's size beside it."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", stage, str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout)
    file_mib = path.stat().st_size / 2**20
    return {
        **{k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()},
        "file_mib": round(file_mib, 3),
        "peak_over_file": round(result["peak_mib"] / file_mib, 2),
    }


def reply_of(index: int) -> str:
    """The reply graded for example ``index``: distinct per example, about 150 words."""
    return f"Reply {index}. " + text(random.Random(index), 150)


async def score(path: Path, examples: int, latency: float, concurrency: int, base_url: str) -> dict[str, Any]:
    """One reply per example of the first ``examples`` graded through the criteria run's grader."""
    from envs.build import criteria_grader
    from envs.config import EnvConfig
    from envs.criteria.data import load_criteria_examples
    from rubrics.criteria.criterion import Criterion

    data = load_criteria_examples(path)[:examples]
    overrides = dict(o.split("=", 1) for o in run_overrides(path))
    cfg = EnvConfig.model_validate(
        {**{k.removeprefix("env."): v for k, v in overrides.items()}, "judge_base_url": base_url}
        | {"judge_concurrency": concurrency}
    )
    grader, client = criteria_grader(cfg, data)
    assert client is not None  # HealthBench's criteria have no rules: an LLM judge grades them
    async with client:
        warmup = [Criterion(weight=1.0, requirement="warm-up")]
        await asyncio.gather(*(grader.grade(warmup, f"w{i}") for i in range(concurrency)))
        before = client.stats.snapshot()
        cpu0, start = time.process_time(), time.perf_counter()
        reports = await asyncio.gather(
            *(
                grader.grade(e.criteria, reply_of(i), query=e.query, reference=e.reference_answer)
                for i, e in enumerate(data)
            )
        )
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
        judge = client.stats.since(before)
    return {
        "examples": len(data),
        "calls": sum(len(e.criteria) for e in data),
        "wall_s": wall,
        "client_cpu_s": cpu,
        "requests": int(judge["judge/requests"]),
        "retries": int(judge["judge/retries"]),
        "mean_score": sum(r.score for r in reports) / len(reports),
        "judge": judge,
    }


def scoring(path: Path, examples: int, latency: float, concurrency: int) -> dict[str, Any]:
    """``score`` against ``judge_bound.py``'s server in its own process, summarised as that file does."""
    from benchmarks.judge_bound import cpu_seconds, start_server, summarize

    proc, base_url = start_server(latency)
    try:
        result = asyncio.run(score(path, examples, latency, concurrency, base_url))
        server_cpu = cpu_seconds(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return {"latency_s": latency, "concurrency": concurrency, **summarize(result, latency, concurrency)} | {
        "server_cpu_s": server_cpu
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=int, default=5000)
    parser.add_argument("--criteria", type=int, default=48000, help="criteria over all examples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the judge takes per answer")
    parser.add_argument("--concurrency", type=int, default=64, help="judge calls in flight at most")
    parser.add_argument("--score-examples", type=int, help="score the first N examples (default: all)")
    parser.add_argument("--out", type=Path, help="write the files here (default: a temporary folder)")
    parser.add_argument(
        "--stages", default=",".join(STAGES), help="comma-separated, of %(default)s (default: all)"
    )
    parser.add_argument(
        "--kill-at", type=float, default=0.5, help="resume: kill the first session at this share written"
    )
    parser.add_argument("--child", nargs=2, metavar=("STAGE", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.out or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        files = write_dataset(folder, args.examples, args.criteria, args.seed)
        out: dict[str, Any] = {
            "examples": args.examples,
            "criteria": args.criteria,
            "seed": args.seed,
            "write_s": round(time.perf_counter() - start, 3),
            "formats": sorted(files),
        }
        stages = args.stages.split(",")
        for stage in ("load", "preflight"):
            if stage in stages:
                out[stage] = {kind: measure(stage, path) for kind, path in files.items()}
        scored = args.examples if args.score_examples is None else args.score_examples
        if "scoring" in stages:
            out["scoring"] = scoring(files["jsonl"], scored, args.latency, args.concurrency)
        if "resume" in stages:
            from benchmarks.eval_resume import measure as resume

            resume_args = (args.examples, args.latency, args.concurrency, args.kill_at)
            out["resume"] = resume(files["jsonl"], folder, *resume_args)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
