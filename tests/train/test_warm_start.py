"""The supervised warm start: its demonstration files, the assistant-only mask, learning, and a run with it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rubrics.loading import FileLoadError
from train.demonstrations import Demonstration, check_not_held_out, load_demonstrations

ROOT = Path(__file__).resolve().parents[2]
DEMOS = ROOT / "configs/scenarios/first_responder_train_demos.jsonl"
GOOD = {
    "scenario": "a",
    "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
}


def write(tmp_path: Path, *lines: object) -> Path:
    path = tmp_path / "demos.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def test_the_shipped_demonstrations_load() -> None:
    demos = load_demonstrations(DEMOS)
    assert len(demos) >= 40 and all(d.messages[-1]["role"] == "assistant" for d in demos)


@pytest.mark.parametrize(
    ("line", "where", "reason"),
    [
        ("{not json", ":2:", "not valid JSON"),
        ([1, 2], ":2:", "wrong type"),
        ({"messages": GOOD["messages"]}, ":2: scenario:", "scenario's name"),
        ({"scenario": "b", "messages": []}, ":2: messages:", "non-empty list"),
        ({"scenario": "b", "messages": [GOOD["messages"][1]]}, ":2: messages[0].role:", "expected 'user'"),
        (
            {"scenario": "b", "messages": [{"role": "user", "content": " "}]},
            ":2: messages[0].content:",
            "text",
        ),
        (
            {"scenario": "b", "messages": [{"role": "user", "text": "x"}]},
            ":2: messages[0]:",
            "{role, content}",
        ),
        ({"scenario": "b", "messages": GOOD["messages"][:1]}, ":2: messages:", "no assistant reply"),
    ],
)
def test_a_bad_line_is_named_with_its_field(tmp_path: Path, line: object, where: str, reason: str) -> None:
    path = write(tmp_path, GOOD, line)
    with pytest.raises(FileLoadError) as err:
        load_demonstrations(path)
    assert str(err.value).startswith(f"{path}{where}") and reason in str(err.value)


def test_an_empty_file_and_a_missing_one_are_refused(tmp_path: Path) -> None:
    with pytest.raises(FileLoadError, match="no demonstrations"):
        load_demonstrations(write(tmp_path, ""))
    with pytest.raises(FileLoadError, match="file not found"):
        load_demonstrations(tmp_path / "nope.jsonl")


def test_a_demonstration_of_a_held_out_scenario_is_refused() -> None:
    demos = [Demonstration("train_1", GOOD["messages"]), Demonstration("held_2", GOOD["messages"])]
    check_not_held_out(demos, ["held_1"], "d.jsonl")
    with pytest.raises(FileLoadError, match=r"1 demonstration.*'held_2'.*leak"):
        check_not_held_out(demos, ["held_2"], "d.jsonl")


def test_only_the_assistant_turns_are_trained_and_the_tokens_are_the_templates(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    from envs.chat import chat_ids
    from train.warm_start import encode

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    messages = load_demonstrations(DEMOS)[0].messages
    seq = encode(tokenizer, "Be an EMT.", messages)
    full = [{"role": "system", "content": "Be an EMT."}, *messages]
    assert seq.ids == chat_ids(tokenizer, full, add_generation_prompt=False)  # what a rollout holds
    spans, current = [], []
    for token, keep in zip(seq.ids, seq.loss_mask, strict=True):
        if keep:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    spans += [current] if current else []
    replies = [m["content"] for m in messages if m["role"] == "assistant"]
    assert len(spans) == len(replies)
    for span, reply in zip(spans, replies, strict=True):
        text = tokenizer.decode(span)
        assert text.startswith(reply) and text[len(reply) :].strip() in {tokenizer.eos_token, "<|im_end|>"}


@pytest.mark.slow
def test_imitation_raises_the_likelihood_of_the_demonstrations(tiny_model_dir: Path) -> None:
    """Three epochs on four demonstrations: the loss falls epoch by epoch (the tiny model learns)."""
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from train.config import WarmStartConfig
    from train.warm_start import encode, imitate

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    sequences = [encode(tokenizer, None, d.messages) for d in load_demonstrations(DEMOS)[:4]]
    cfg = WarmStartConfig(demonstrations="x", epochs=3, learning_rate=3e-3, batch_size=2, micro_batch_size=1)
    logged: list[float] = []
    stats = imitate(
        model,
        tokenizer,
        sequences,
        cfg,
        Accelerator(cpu=True),
        0,
        lambda s, m: logged.append(m["warm_start/loss"]),
    )
    assert stats["steps"] == len(logged) == 6 and stats["trained_tokens"] > 0
    first, second, third = stats["epoch_loss"]
    assert math.isfinite(first) and first > second > third
    # the output head a few positions at a time (optim.logits_chunk_tokens): the same training
    chunked = imitate(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        tokenizer,
        sequences,
        cfg,
        Accelerator(cpu=True),
        0,
        lambda s, m: None,
        logits_chunk_tokens=5,
    )
    assert chunked["epoch_loss"] == pytest.approx(stats["epoch_loss"], rel=1e-4)


@pytest.mark.slow
def test_a_run_with_a_warm_start_evaluates_it_reports_it_and_reuses_it(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    import torch

    from tests.train.runs import SMALL_RUN, metrics, run_config
    from train.trainer import train

    monkeypatch.chdir(ROOT)
    demos = tmp_path / "demos.jsonl"
    demos.write_text("".join(DEMOS.read_text().splitlines(keepends=True)[:4]))
    overrides = [
        *SMALL_RUN,
        "logging.progress=true",
        f"warm_start.demonstrations={demos}",
        "warm_start.epochs=1",
        "warm_start.batch_size=2",
    ]
    run = tmp_path / "run"
    cfg = run_config("first_responder_cpu.yaml", tiny_model_dir, run, "max_steps=1", *overrides)
    train(cfg)
    stats = json.loads((run / "warm_start" / "warm_start.json").read_text())
    assert stats["steps"] == 2 and stats["demonstrations"] == 4
    assert (run / "eval_warm_start" / "summary.json").is_file()
    assert any("eval_warm_start/reward_mean" in r for r in metrics(run))
    report = (run / "report.md").read_text()
    assert "| held-out | before | after the warm start | after |" in report
    assert "| warm start only |" in report and "- warm start only: " in report
    assert "warm start step 2" in capsys.readouterr().out

    # a longer run in the same folder resumes at step 1: no second imitation, the reference is the warm start
    from transformers import AutoModelForCausalLM

    from train import trainer as trainer_module

    seen = {}
    real = trainer_module.run_warm_start

    def spy(cfg, run, policy, env, held, start):
        real(cfg, run, policy, env, held, start)
        seen["start"], seen["ref"] = start, policy.ref_model

    monkeypatch.setattr(trainer_module, "run_warm_start", spy)
    cfg2 = run_config("first_responder_cpu.yaml", tiny_model_dir, run, "max_steps=2", *overrides)
    train(cfg2)
    assert seen["start"] == 1 and "warm start: loaded" in capsys.readouterr().out
    warmed = AutoModelForCausalLM.from_pretrained(run / "warm_start").state_dict()
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    ref = seen["ref"].state_dict()
    assert all(torch.equal(ref[k], warmed[k]) for k in warmed)
    assert not all(torch.equal(base[k], warmed[k]) for k in warmed)


def test_imitation_runs_under_gradient_checkpointing_when_the_model_has_it(tiny_model_dir: Path) -> None:
    """A model loads in eval mode, where transformers skips checkpointing: the warm start must train in
    training mode, or ``model.gradient_checkpointing`` saves no memory there (the main job's peak)."""
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from train.config import WarmStartConfig
    from train.warm_start import encode, imitate

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    # transformers 5.25 renamed it; the trainer calls whichever the installed version has (train.policy)
    getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    layer = model.model.layers[0]
    checkpointed: list[int] = []
    original = layer._gradient_checkpointing_func
    layer._gradient_checkpointing_func = lambda *a, **k: checkpointed.append(1) or original(*a, **k)
    sequences = [encode(tokenizer, None, d.messages) for d in load_demonstrations(DEMOS)[:2]]
    cfg = WarmStartConfig(demonstrations="x", epochs=1, learning_rate=1e-3, batch_size=2, micro_batch_size=1)
    imitate(model, tokenizer, sequences, cfg, Accelerator(cpu=True), 0, lambda s, m: None)
    assert len(checkpointed) == 2  # one per micro-batch
