"""How close judge-bound scoring gets to its ideal: 256 rollouts x 8 criteria, one judge call each, against
the local judge server answering after 50 ms, at most 64 calls in flight.

    ideal_s = calls x latency / concurrency        (2048 x 0.05 / 64 = 1.6 s)
    ratio   = wall_s / ideal_s                     (target <= 1.2)

The server runs in its own process (as a real judge would), so its CPU does not compete with the client's.
The timed run follows a warm-up of one call per connection. Prints one JSON object.
Run: ``.venv/bin/python benchmarks/judge_bound.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: make rubrics and tests.support importable

from rubrics.autograders import PerCriterionGrader  # noqa: E402
from rubrics.criteria import CriteriaRubric  # noqa: E402
from rubrics.judges import LLMJudgeClient  # noqa: E402
from rubrics.types import State  # noqa: E402


def start_server(latency_s: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.judge_server", "--delay", str(latency_s)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    return proc, f"http://127.0.0.1:{port}/v1"


async def run(
    base_url: str, rollouts: int, criteria: int, group: int, concurrency: int, lean_http: bool
) -> dict[str, Any]:
    rubric = CriteriaRubric(
        [{"weight": float(i + 1), "requirement": f"Requirement {i}"} for i in range(criteria)]
    )
    async with LLMJudgeClient(
        base_url, "judge", max_concurrency=concurrency, cache=False, lean_http=lean_http
    ) as client:
        scoring = rubric.as_rubric(PerCriterionGrader.from_client(client))
        warmup: list[State] = [{"prompt": "warm-up", "completion": f"w{i}"} for i in range(concurrency)]
        await scoring.score_group(warmup)
        warmup_requests = client.stats.requests
        states: list[dict[str, Any]] = [
            {"prompt": f"q{i // group}", "completion": f"answer {i}"} for i in range(rollouts)
        ]
        groups = [states[i : i + group] for i in range(0, rollouts, group)]
        cpu0, start = time.process_time(), time.perf_counter()
        await asyncio.gather(*(scoring.score_group(g) for g in groups))  # type: ignore[arg-type]
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
        return {
            "wall_s": wall,
            "client_cpu_s": cpu,
            "requests": client.stats.requests - warmup_requests,
            "retries": client.stats.retries,
            "errored_rollouts": sum(1 for s in states if s.get("error")),
            "mean_reward": sum(s["reward"] for s in states) / len(states),
        }


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (Linux ``/proc``; 0.0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=256)
    parser.add_argument("--criteria", type=int, default=8)
    parser.add_argument("--group", type=int, default=8, help="rollouts per GRPO group")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the server takes per answer")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--httpx", action="store_true", help="httpx's own pool instead of the lean transport")
    args = parser.parse_args()
    proc, base_url = start_server(args.latency)
    try:
        result = asyncio.run(
            run(base_url, args.rollouts, args.criteria, args.group, args.concurrency, not args.httpx)
        )
        result["server_cpu_s"] = _cpu_seconds(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    calls = args.rollouts * args.criteria
    ideal = calls * args.latency / args.concurrency
    out = {
        "rollouts": args.rollouts,
        "criteria": args.criteria,
        "calls": calls,
        "latency_s": args.latency,
        "concurrency": args.concurrency,
        "transport": "httpx" if args.httpx else "lean",
        "ideal_s": round(ideal, 4),
        **{k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()},
        "ratio": round(result["wall_s"] / ideal, 4),
        "client_cpu_ms_per_call": round(1000 * result["client_cpu_s"] / calls, 4),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
