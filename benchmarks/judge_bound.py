"""How close judge-bound scoring gets to its ideal, against the local judge server answering after 50 ms,
at most 64 calls in flight. Two cases, one after the other on one server:

- ``rubric``: 256 rollouts x 8 criteria, one judge call each, through ``CriteriaRubric.as_rubric`` and
  ``score_group`` (one rubric for every prompt, no cache);
- ``criteria``: per-prompt criteria as the criteria environment grades them: 32 prompts x 8 rollouts, each
  prompt with its own 8 criteria of which 3 carry a rule, graded by ``RuleFirstGrader`` over
  ``PerCriterionGrader`` with the prompt's query and reference answer (cache on, as in training): the
  rules are judged offline, so 256 x 5 = 1280 judge calls.

    ideal_s = LLM calls x latency / concurrency    (rubric: 2048 x 0.05 / 64 = 1.6 s; criteria: 1.0 s)
    ratio   = wall_s / ideal_s                     (target <= 1.2)

The server runs in its own process (as a real judge would), so its CPU does not compete with the client's
(on a machine with cores to spare). Each timed run follows a warm-up of one call per connection. Prints
one JSON object with a key per case; ``judge`` is the client's counters over the timed run.
Run: ``.venv/bin/python benchmarks/judge_bound.py`` (``--case criteria`` for one case).
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

from rubrics.criteria.autograders import PerCriterionGrader  # noqa: E402
from rubrics.criteria.autograders.mixed import RuleFirstGrader  # noqa: E402
from rubrics.criteria.criterion import Criterion  # noqa: E402
from rubrics.criteria.rubric import CriteriaRubric  # noqa: E402
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


async def run_rubric(
    base_url: str, rollouts: int, criteria: int, group: int, concurrency: int, lean_http: bool
) -> dict[str, Any]:
    """The ``rubric`` case: one rubric of LLM criteria for every prompt, through ``score_group``."""
    rubric = CriteriaRubric(
        [{"weight": float(i + 1), "requirement": f"Requirement {i}"} for i in range(criteria)]
    )
    async with LLMJudgeClient(
        base_url, "judge", max_concurrency=concurrency, cache=False, lean_http=lean_http
    ) as client:
        scoring = rubric.as_rubric(PerCriterionGrader.from_client(client))
        warmup: list[State] = [{"prompt": "warm-up", "completion": f"w{i}"} for i in range(concurrency)]
        await scoring.score_group(warmup)
        before = client.stats.snapshot()
        states: list[dict[str, Any]] = [
            {"prompt": f"q{i // group}", "completion": f"answer {i}"} for i in range(rollouts)
        ]
        groups = [states[i : i + group] for i in range(0, rollouts, group)]
        cpu0, start = time.process_time(), time.perf_counter()
        await asyncio.gather(*(scoring.score_group(g) for g in groups))  # type: ignore[arg-type]
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
        return {
            "rollouts": rollouts,
            "criteria": criteria,
            "calls": rollouts * criteria,
            "wall_s": wall,
            "client_cpu_s": cpu,
            "requests": client.stats.requests - int(before["judge/requests"]),
            "retries": client.stats.retries,
            "errored_rollouts": sum(1 for s in states if s.get("error")),
            "mean_reward": sum(s["reward"] for s in states) / len(states),
            "judge": client.stats.since(before),
        }


def prompt_criteria(prompt: int, criteria: int, rules: int) -> list[Criterion]:
    """Prompt ``prompt``'s own criteria: the first ``rules`` carry a rule (the last of them a negative
    weight: an error to avoid), the rest go to the LLM judge."""
    out = []
    for i in range(criteria):
        ruled = i < rules
        out.append(
            Criterion(
                weight=-2.0 if ruled and i == rules - 1 else float(i + 1),
                requirement=f"Prompt {prompt}: requirement {i}",
                rule={"any": [f"point{i}"]} if ruled else None,
            )
        )
    return out


def completion_of(rollout: int, rules: int) -> str:
    """A distinct completion; it says a rule's phrase for some rollouts and not others."""
    said = " ".join(f"point{i}" for i in range(rules) if (rollout >> i) & 1)
    return f"Answer {rollout}, which mentions {said or 'nothing ruled'}."


async def run_criteria(
    base_url: str, prompts: int, group: int, criteria: int, rules: int, concurrency: int, lean_http: bool
) -> dict[str, Any]:
    """The ``criteria`` case: per-prompt criteria, rules first, the rest on the LLM judge."""
    per_prompt = [prompt_criteria(p, criteria, rules) for p in range(prompts)]
    rollouts = prompts * group
    async with LLMJudgeClient(base_url, "judge", max_concurrency=concurrency, lean_http=lean_http) as client:
        grader = RuleFirstGrader(PerCriterionGrader.from_client(client))
        warmup = [Criterion(weight=1.0, requirement="warm-up")]
        await asyncio.gather(*(grader.grade(warmup, f"w{i}") for i in range(concurrency)))
        before = client.stats.snapshot()
        cpu0, start = time.process_time(), time.perf_counter()
        reports = await asyncio.gather(
            *(
                grader.grade(
                    per_prompt[r // group],
                    completion_of(r, rules),
                    query=f"Question {r // group}?",
                    reference=f"A reference answer to question {r // group}.",
                )
                for r in range(rollouts)
            )
        )
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
        judge = client.stats.since(before)
    return {
        "prompts": prompts,
        "rollouts": rollouts,
        "criteria": criteria,
        "rule_criteria": rules,
        "calls": rollouts * (criteria - rules),
        "wall_s": wall,
        "client_cpu_s": cpu,
        "requests": int(judge["judge/requests"]),
        "retries": int(judge["judge/retries"]),
        "mean_reward": sum(r.score for r in reports) / len(reports),
        "judge": judge,
    }


def summarize(result: dict[str, Any], latency: float, concurrency: int) -> dict[str, Any]:
    """The case's numbers rounded, with its ideal time, its ratio and the client's CPU per call."""
    ideal = result["calls"] * latency / concurrency
    rounded = {k: _round(v) for k, v in result.items()}
    return {
        **rounded,
        "ideal_s": round(ideal, 4),
        "ratio": round(result["wall_s"] / ideal, 4),
        "client_cpu_ms_per_call": round(1000 * result["client_cpu_s"] / result["calls"], 4),
    }


def _round(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    return round(value, 4) if isinstance(value, float) else value


def cpu_seconds(pid: int) -> float:
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
    parser.add_argument("--case", choices=["rubric", "criteria", "both"], default="both")
    parser.add_argument("--rollouts", type=int, default=256, help="rubric case: rollouts")
    parser.add_argument("--criteria", type=int, default=8, help="criteria per rubric (per prompt)")
    parser.add_argument("--group", type=int, default=8, help="rollouts per GRPO group")
    parser.add_argument(
        "--prompts", type=int, default=32, help="criteria case: prompts, each its own criteria"
    )
    parser.add_argument("--rules", type=int, default=3, help="criteria case: criteria per prompt with a rule")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the server takes per answer")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--httpx",
        action="store_true",
        help="the openai SDK over httpx's own pool instead of the lean path (LeanChatPost)",
    )
    args = parser.parse_args()
    lean = not args.httpx
    out: dict[str, Any] = {
        "latency_s": args.latency,
        "concurrency": args.concurrency,
        "transport": "httpx" if args.httpx else "lean",
    }
    proc, base_url = start_server(args.latency)
    try:
        if args.case in ("rubric", "both"):
            rubric = asyncio.run(
                run_rubric(base_url, args.rollouts, args.criteria, args.group, args.concurrency, lean)
            )
            out["rubric"] = summarize(rubric, args.latency, args.concurrency)
        if args.case in ("criteria", "both"):
            criteria = asyncio.run(
                run_criteria(
                    base_url, args.prompts, args.group, args.criteria, args.rules, args.concurrency, lean
                )
            )
            out["criteria"] = summarize(criteria, args.latency, args.concurrency)
        out["server_cpu_s"] = cpu_seconds(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
