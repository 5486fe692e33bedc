"""A real LLM judge, end to end (issue 51): a ``vllm serve`` process of SmolLM2-135M-Instruct, started as a
user starts a judge (no test-only server option), judges the criteria without a rule of a two-step criteria
run of the tiny policy; the criteria with a rule are judged by their rule. The judge is asked for its verdict
through the server's structured output (a JSON schema whose free text is bounded), so the small model
cannot answer in free text or write until ``max_tokens`` runs out."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from envs.serving.server import VllmServer
from rubrics.criteria.criterion import Criterion
from rubrics.criteria.example import CriteriaExample
from tests.train.runs import SMALL_RUN, metrics, run_config
from train.trainer import train

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def smollm2_judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """SmolLM2-135M-Instruct behind vLLM's OpenAI server, with the server's own structured-output backend."""
    from tests.support.vllm_fixtures import smollm2_vllm_server

    with smollm2_vllm_server(tmp_path_factory.mktemp("judge-vllm"), 2048) as server:
        yield server


def mixed_dataset(path: Path, n: int, tag: str) -> Path:
    """``n`` prompts, each with one criterion judged by a rule and one that only the LLM judge grades."""
    examples = [
        CriteriaExample(
            id=f"{tag}-{k}",
            prompt=f"I burned my hand on the stove ({tag} {k}). What should I do?",
            criteria=[
                Criterion(
                    name="cool",
                    weight=2.0,
                    requirement="Cool the burn under running water",
                    rule={"any": ["water", "cool"]},
                ),
                Criterion(name="calm", weight=1.0, requirement="Says to stay calm and check the burn"),
            ],
        )
        for k in range(n)
    ]
    path.write_text("".join(e.model_dump_json() + "\n" for e in examples))
    return path


@pytest.mark.vllm
@pytest.mark.slow
def test_a_vllm_served_judge_grades_a_two_step_criteria_run(
    smollm2_judge: VllmServer, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    run = tmp_path / "run"
    cfg = run_config(
        "criteria_cpu.yaml",
        tiny_model_dir,
        run,
        "max_steps=2",
        f"env.data={mixed_dataset(tmp_path / 'train.jsonl', 2, 'train')}",
        f"env.eval_data={mixed_dataset(tmp_path / 'held.jsonl', 2, 'held')}",
        f"env.judge_base_url={smollm2_judge.base_url}/v1",
        f"env.judge_model={smollm2_judge.model}",
        "env.judge_timeout_s=120",
        "env.judge_max_attempts=3",
        *SMALL_RUN,
        "rollout.max_tokens=16",
    )
    train(cfg)
    steps = [r for r in metrics(run) if "reward/mean" in r]
    assert len(steps) == 2
    # 2 prompts x 2 replies: 4 verdicts of the rule, and 4 asked of the judge (a repeated reply is a hit);
    # step 1's count also holds the calls made before it: the probe's trivial replies, the first evaluation's
    assert steps[0]["judge/calls"] > 4.0 and steps[1]["judge/calls"] == 4.0
    for step in steps:
        assert step["criteria/rule_judged_fraction"] == 0.5
        assert step["judge/requests"] + step["judge/cache_hits"] >= 4.0
        assert step["judge/prompt_tokens"] > 0 and step["judge/completion_tokens"] > 0
        assert step["judge/seconds"] > 0
        # every verdict came back, through the JSON schema: a server that refused it would show a fallback
        assert step["judge/failures"] == 0.0 and step["judge/fallbacks"] == 0.0
        assert step["errored_fraction"] == 0.0
    # the held-out evaluations were judged the same way
    verdicts = [v for f in run.glob("eval_*/rollouts.jsonl") for v in _verdicts(f)]
    assert {v["judged_by"] for v in verdicts} == {"rule", "llm"}
    llm = [v for v in verdicts if v["judged_by"] == "llm"]
    assert len(llm) == 4  # 2 held-out prompts x 1 reply, before and after training
    assert all(isinstance(v["met"], bool) for v in llm)


def _verdicts(path: Path) -> list[dict]:
    """The criterion verdicts of every rollout of one evaluation's ``rollouts.jsonl``."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [v for row in rows for v in row["criteria"]["verdicts"]]
