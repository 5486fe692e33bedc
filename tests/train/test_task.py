"""The environment the trainer builds from a run config: held-out split, judge selection and endpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

from transformers import AutoTokenizer

from rubrics.multistep.judging import LLMRequirementJudge, RuleJudge
from train.config import load_config
from train.task import build_task

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs/train/first_responder_cpu.yaml"


def test_held_out_scenarios_are_not_trained_on(tiny_model_dir: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    env, train, held = build_task(load_config(CONFIG), tokenizer)
    names = lambda examples: {e["info"]["scenario"] for e in examples}  # noqa: E731
    assert len(held) == 3 and len(train) == 10 and not names(train) & names(held)
    assert isinstance(env.multistep_rubric.judges[env.multistep_rubric.default_judge], RuleJudge)


def test_judge_endpoint_override(tiny_model_dir: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    cfg = load_config(
        CONFIG,
        ["env.judge=llm", "env.judge_base_url=http://judge-host:9000/v1", "env.judge_model=qwen-judge"],
    )
    env, _, _ = build_task(cfg, tokenizer)
    judge = env.multistep_rubric.judges["llm"]
    assert isinstance(judge, LLMRequirementJudge) and env.multistep_rubric.default_judge == "llm"
    assert (judge.base_url, judge.model) == ("http://judge-host:9000/v1", "qwen-judge")
    with pytest.raises(
        ValueError, match=r"env\.judge_base_url: the judge in use, 'rules', is not an LLM judge"
    ):
        build_task(load_config(CONFIG, ["env.judge_base_url=http://judge-host:9000/v1"]), tokenizer)
