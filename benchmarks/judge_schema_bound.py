"""A small judge's verdicts through vLLM's structured output, with the verdict schema's explanation bounded
(``REASON_MAX_CHARS``, what the client sends) and without the bound, side by side on one server.

SmolLM2-135M-Instruct behind ``vllm serve`` (the server's own structured-output backend) grades one
criterion against four replies, all four requests at once, per arm: two replies a random policy wrote (the
tiny model's text, which a small judge rambles about) and two plain sentences. Each request asks for at most
``--max-tokens`` tokens (the judge client's default, 2048) at temperature 0.

Prints one JSON object: per arm the wall seconds of the four requests, and per reply its seconds,
completion tokens and finish reason (``length``: the explanation ran until ``max_tokens``, no verdict).
Run: ``.venv/bin/python benchmarks/judge_schema_bound.py`` (needs ``./install.sh --with-vllm``).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: make the packages importable

from envs.models import resolve_model  # noqa: E402
from envs.serving.server import VllmServer  # noqa: E402
from rubrics.criteria.autograders.prompts import PER_CRITERION_SYSTEM_PROMPT  # noqa: E402
from rubrics.criteria.autograders.schemas import PerCriterionOutput  # noqa: E402

USER = (
    "<criterion_type>positive</criterion_type>\n<criterion>\nSays to stay calm and check the burn\n"
    "</criterion>\n<query>\nI burned my hand on the stove. What should I do?\n</query>\n"
    "<response>\n{}\n</response>"
)
REPLIES = (
    # what the tiny random policy of tests/train/test_real_judge.py wrote in one of its runs
    '\ufffdch\x17unday\ufffddv acc\ufffd safe thrustsonsinetiqu {"bj',
    "{score_stA\r policy Januaryorefmis\ufffd sam| is helpful",
    "Run cool water over the burn.",
    "Stay calm.",
)


def schemas() -> dict[str, dict[str, Any]]:
    """The verdict schema as the client sends it, and the same without the explanation's bound."""
    bounded = PerCriterionOutput.model_json_schema()
    unbounded = copy.deepcopy(bounded)
    del unbounded["properties"]["explanation"]["maxLength"]
    return {"bounded": bounded, "unbounded": unbounded}


async def ask(
    client: httpx.AsyncClient, url: str, model: str, schema: dict, reply: str, max_tokens: int
) -> dict:
    """One verdict request; its seconds, completion tokens and finish reason."""
    start = time.perf_counter()
    messages = [
        {"role": "system", "content": PER_CRITERION_SYSTEM_PROMPT},
        {"role": "user", "content": USER.format(reply)},
    ]
    fmt = {"type": "json_schema", "json_schema": {"name": "PerCriterionOutput", "schema": schema}}
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0}
    answer = (await client.post(url, json={**body, "response_format": fmt}, timeout=900)).json()
    return {
        "seconds": round(time.perf_counter() - start, 2),
        "completion_tokens": answer["usage"]["completion_tokens"],
        "finish_reason": answer["choices"][0]["finish_reason"],
    }


async def arms(server: VllmServer, max_tokens: int) -> dict[str, Any]:
    """Each arm's four requests at once, one arm after the other."""
    url = f"{server.base_url}/v1/chat/completions"
    out: dict[str, Any] = {}
    async with httpx.AsyncClient() as client:
        for name, schema in schemas().items():
            start = time.perf_counter()
            calls = [ask(client, url, server.model, schema, r, max_tokens) for r in REPLIES]
            each = await asyncio.gather(*calls)
            out[name] = {"wall_s": round(time.perf_counter() - start, 2), "replies": each}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=2048)
    args = parser.parse_args()
    with VllmServer(resolve_model("smollm2"), max_model_len=4096, startup_timeout=600) as server:
        print(json.dumps(asyncio.run(arms(server, args.max_tokens))))


if __name__ == "__main__":
    main()
