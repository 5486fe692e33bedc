"""Scoring throughput: ``score_group`` over 1,000 rollouts in groups of 8, three reward functions (one
async), this project against verifiers 0.2.1 on the same states in one run.

    .venv/bin/python benchmarks/scoring.py [--rollouts 1000] [--group-size 8] [--repeats 5]

verifiers 0.2.1 (the last release whose top level has ``Rubric``) is installed in a throwaway virtual
environment of its own (``.venv-bench-verifiers``, made on first use). Each implementation runs in its own
process on identical states; the best of ``--repeats`` timed passes counts, after one warm-up pass. The
rewards of both are compared, so a faster run that scores differently is reported, not hidden.
Prints one JSON object: ``ours_rollouts_per_s``, ``peer_rollouts_per_s``, ``ratio`` (target >= 3).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PEER_VENV = ROOT / ".venv-bench-verifiers"
PEER_SPEC = "verifiers==0.2.1"


# -- the workload: identical for both implementations -----------------------------------------------


def exact_match(completion, answer, **kwargs) -> float:
    text = completion[-1]["content"]
    return 1.0 if answer in text else 0.0


def brevity(completion, **kwargs) -> float:
    return max(0.0, 1.0 - len(completion[-1]["content"]) / 400)


async def judge_stub(completion, answer, **kwargs) -> float:
    await asyncio.sleep(0)  # an async reward function (a judge) that answers at once
    return 0.5 if completion[-1]["content"].endswith(".") else 0.0


def make_states(n: int) -> list[dict[str, Any]]:
    states = []
    for i in range(n):
        answer = str(i % 13)
        text = f"Let me think about case {i}. The answer is {(i * 7) % 13}" + ("." if i % 3 else "")
        states.append(
            {
                "prompt": [{"role": "user", "content": f"Question {i // 8}: what is the residue?"}],
                "completion": [{"role": "assistant", "content": text}],
                "answer": answer,
                "task": "default",
                "info": {"index": i},
                "trajectory": [],
                "timing": {"generation_ms": 0.0, "total_ms": 0.0, "scoring_ms": 0.0},
            }
        )
    return states


def run_worker(impl: str, n: int, group_size: int, repeats: int) -> dict[str, Any]:
    if impl == "ours":
        from rubrics import Rubric
    else:
        import logging

        logging.disable(logging.CRITICAL)
        from verifiers import Rubric  # type: ignore[no-redef]

    rubric = Rubric(funcs=[exact_match, brevity, judge_stub], weights=[1.0, 0.2, 0.5])

    async def one_pass() -> tuple[float, list[dict[str, Any]]]:
        states = make_states(n)
        groups = [states[i : i + group_size] for i in range(0, n, group_size)]
        start = time.perf_counter()
        await asyncio.gather(*(rubric.score_group(g) for g in groups))
        return time.perf_counter() - start, states

    asyncio.run(one_pass())  # warm-up
    times = []
    states: list[dict[str, Any]] = []
    for _ in range(repeats):
        elapsed, states = asyncio.run(one_pass())
        times.append(elapsed)
    digest = hashlib.sha256(
        json.dumps([[round(s["reward"], 9), round(s["advantage"], 9)] for s in states]).encode()
    ).hexdigest()
    return {"best_s": min(times), "rollouts_per_s": n / min(times), "scores_sha256": digest}


# -- the driver ----------------------------------------------------------------------------------------


def ensure_peer_venv() -> Path:
    python = PEER_VENV / "bin" / "python"
    marker = PEER_VENV / ".installed"
    if not marker.exists() or marker.read_text() != PEER_SPEC:
        print(f"[bench] installing {PEER_SPEC} into {PEER_VENV} (first run only)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", PEER_SPEC], check=True)
        marker.write_text(PEER_SPEC)
    return python


def run_in(python: Path | str, impl: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [str(python), __file__, "--worker", impl, "--rollouts", str(args.rollouts)]
    cmd += ["--group-size", str(args.group_size), "--repeats", str(args.repeats)]
    env = {**os.environ, "PYTHONPATH": str(ROOT) if impl == "ours" else ""}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--worker", choices=["ours", "verifiers"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run_worker(args.worker, args.rollouts, args.group_size, args.repeats)))
        return
    peer_python = ensure_peer_venv()
    ours = run_in(sys.executable, "ours", args)
    peer = run_in(peer_python, "verifiers", args)
    print(
        json.dumps(
            {
                "benchmark": "score_group",
                "rollouts": args.rollouts,
                "group_size": args.group_size,
                "reward_funcs": 3,
                "peer": PEER_SPEC,
                "ours_rollouts_per_s": round(ours["rollouts_per_s"], 1),
                "peer_rollouts_per_s": round(peer["rollouts_per_s"], 1),
                "ratio": round(ours["rollouts_per_s"] / peer["rollouts_per_s"], 2),
                "same_scores": ours["scores_sha256"] == peer["scores_sha256"],
            }
        )
    )


if __name__ == "__main__":
    main()
