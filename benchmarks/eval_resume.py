"""``criteria_full_size.py``'s ``resume`` stage: the evaluation of every example, stopped by SIGKILL partway
and resumed, against a judge that answers after ``--latency`` seconds.

Each session is ``rubric-grpo eval``'s own job (``envs.evaluation.job.run_job``: the folder's record, the
resumable ``rollouts.jsonl``, the summary) in a fresh process, with one change: its policy is a fixed reply
per example (``FixedReplies``, about 150 words, distinct per prompt) instead of a model's, so that the
judge's calls, not sampling, set the time; the tiny model's tokenizer builds the prompts. One rollout per
example (``n`` 1), ``--concurrency`` groups and judge calls in flight. The judge (``tests.support.
judge_server.JudgeServer``, in this process: the sessions run in others) keeps, for each request, the
reply it judged, which names the example through the final ``rollouts.jsonl``.

The first session is killed once ``--kill-at`` of the examples are written; the second runs to the end on
the same folder. Reported: the examples written before the kill, the judge calls of each session, the calls
the second made for examples already written (the goal: 0), the calls of the first for examples it had not
written when the kill came (lost: their verdicts died with the process, and the second judges them again),
and each session's wall seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REPLY = re.compile(r"<response>\nReply (\w+)\.")


class FixedReplies:
    """A policy that samples nothing: its reply to a prompt is fixed by the prompt (``reply``)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        """Tokenises the replies."""

    async def generate(self, prompt_ids: list[int], params: Any) -> list[Any]:
        """``params.n`` copies of the prompt's reply, uncut."""
        from envs.backends.base import Sample

        text = reply(prompt_ids)
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return [
            Sample(completion_ids=ids, logprobs=[-1.0] * len(ids), text=text, finish_reason="stop")
        ] * params.n

    async def close(self) -> None:
        """Nothing to release."""


def reply(prompt_ids: list[int]) -> str:
    """``Reply <tag>.`` and about 150 words, all drawn from the prompt's hash (the tag names the reply)."""
    from benchmarks.criteria_full_size import text

    tag = hashlib.sha256(json.dumps(prompt_ids).encode()).hexdigest()[:16]
    return f"Reply {tag}. " + text(random.Random(tag), 150)


def session(spec_path: Path) -> None:
    """One session, in this process: ``run_job`` on the spec's dataset and folder, with ``FixedReplies``."""
    from transformers import AutoTokenizer

    import envs.evaluation.job as job_module
    from envs.config import EnvConfig

    spec = json.loads(spec_path.read_text())

    def fixed(kind: str, model_dir: Path, **_: Any) -> tuple[Any, Any]:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        return FixedReplies(tokenizer), tokenizer

    job_module.make_backend = fixed  # type: ignore[assignment]  # the one change: no model samples
    env = EnvConfig(
        type="criteria",
        data=spec["data"],
        judge_base_url=spec["base_url"],
        judge_model="judge",
        judge_concurrency=spec["concurrency"],
        eval_fraction=0.0,
        max_turns=1,
        max_total_tokens=1 << 16,
    )
    job = job_module.EvalJob(
        env=env,
        model=spec["model"],
        n=1,
        out=spec["out"],
        concurrency=spec["concurrency"],
        max_tokens=1 << 12,
    )
    asyncio.run(job_module.run_job(job, progress=False))


def _start(spec: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, __file__, str(spec)], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
        )


class _LineCounter:
    """Counts the lines of a growing file, reading only what was appended since the last count."""

    def __init__(self, path: Path) -> None:
        self.path = path
        """The file."""
        self.offset = 0
        """Bytes counted so far."""
        self.lines = 0
        """Lines counted so far."""

    def __call__(self) -> int:
        if self.path.exists():
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                new = handle.read()
            self.offset += len(new)
            self.lines += new.count(b"\n")
        return self.lines


def measure(
    data: Path, folder: Path, examples: int, latency: float, concurrency: int, kill_at: float
) -> dict[str, Any]:
    """Run the two sessions; returns what the module's docstring lists."""
    from envs.evaluation.resumable import read_finished
    from tests.support.judge_server import JudgeServer

    out, log, spec = folder / "eval", folder / "eval.log", folder / "eval_spec.json"
    with contextlib.redirect_stdout(sys.stderr):  # what transformers' imports print: stdout is the result's
        from envs.models.tiny import build_tiny_model

        model = build_tiny_model(folder / "tiny", seed=0)
    with JudgeServer(delay_s=latency) as judge:
        judge.requests = _Replies()  # keeps each request's reply tag, not its body
        spec.write_text(
            json.dumps(
                {
                    "data": str(data),
                    "base_url": judge.base_url,
                    "model": str(model),
                    "out": str(out),
                    "concurrency": concurrency,
                }
            )
        )
        start = time.perf_counter()
        first, lines = _start(spec, log), _LineCounter(out / "rollouts.jsonl")
        while lines() < kill_at * examples:
            if first.poll() is not None:
                raise RuntimeError(f"the first session ended before the kill: see {log}")
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait()
        killed_s = time.perf_counter() - start
        before = list(judge.requests)
        written = {r.scenario for r in read_finished(out / "rollouts.jsonl", 1).rollouts}
        start = time.perf_counter()
        second = _start(spec, log)
        if second.wait() != 0:
            raise RuntimeError(f"the resumed session failed: see {log}")
        resumed_s = time.perf_counter() - start
        after = list(judge.requests)[len(before) :]
    example_of = {tag_of(r.completion): r.scenario for r in read_finished(out / "rollouts.jsonl", 1).rollouts}
    judged_first = {example_of.get(t) for t in before}
    summary = json.loads((out / "summary.json").read_text())
    return {
        "examples": examples,
        "latency_s": latency,
        "concurrency": concurrency,
        "written_before_kill": len(written),
        "judge_calls_before_kill": len(before),
        "judge_calls_resumed": len(after),
        "calls_for_examples_already_written": sum(example_of.get(t) in written for t in after),
        "calls_before_kill_lost": sum(example_of.get(t) not in written for t in before),
        "examples_judged_not_written": len(judged_first - written),
        "killed_session_s": round(killed_s, 3),
        "resumed_session_s": round(resumed_s, 3),
        "summary_examples": summary["examples"],
        "summary_rollouts": summary["rollouts"],
        "summary_wall_s": round(summary["wall_s"], 3),
        "healthbench_overall": summary.get("healthbench/overall"),
    }


def tag_of(completion: Any) -> str:
    """The tag of a rollout's reply (``reply``)."""
    content = completion[-1]["content"] if isinstance(completion, list) else str(completion)
    return str(content).split(".", 1)[0].removeprefix("Reply ")


class _Replies(list):  # type: ignore[type-arg]
    """``JudgeServer.requests`` that keeps the tag of each request's reply rather than the body (48,000
    bodies would hold hundreds of MiB)."""

    def append(self, body: Any) -> None:
        found = REPLY.search("\n".join(str(m.get("content")) for m in body["messages"]))
        super().append(found.group(1) if found else "?")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    session(Path(sys.argv[1]))
