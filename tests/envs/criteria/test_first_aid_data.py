"""The first-aid criteria data of configs/train/criteria_cpu.yaml: the files are what
scripts/make_first_aid_criteria.py writes, and its pitfalls against degenerate text catch what a reward hacker
would try and what the held-out repetition metric counts."""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from types import ModuleType

import pytest

from envs.criteria.environment import trivial_reply
from rubrics.criteria.autograders.scoring import per_criterion_score
from rubrics.criteria.example import CriteriaExample
from tests.support.scripts import load_script
from train.rollout_metrics import diversity_metrics

ROOT = Path(__file__).parents[3]


def script() -> ModuleType:
    return load_script("make_first_aid_criteria")


@pytest.fixture(scope="module")
def examples() -> list[CriteriaExample]:
    return [CriteriaExample.model_validate(e) for rows in script().files().values() for e in rows]


def met(example: CriteriaExample, text: str) -> set[str]:
    return {c.name or "" for c in example.criteria if c.rule_verdict(text)}


def reward(example: CriteriaExample, text: str) -> float:
    """The environment's reward, clipped: clamp(sum of MET weights / sum of positive weights, 0, 1)."""
    verdicts = [c.rule_verdict(text) for c in example.criteria]
    return per_criterion_score([c.weight for c in example.criteria], verdicts)[0]


def test_the_committed_files_are_what_the_script_writes() -> None:
    module = script()
    written = module.files()
    assert [p.name for p in written] == ["first_aid_criteria_train.jsonl", "first_aid_criteria_heldout.jsonl"]
    for path, rows in written.items():
        assert path.read_text(encoding="utf-8") == module.jsonl(rows), f"{path.name}: run the script again"
    assert [len(rows) for rows in written.values()] == [128, 32]


def test_trivial_policies_score_low(examples: list[CriteriaExample]) -> None:
    for policy, ceiling in (("empty reply", 0.0), ("prompt echoed", 0.05), ("one sentence looped", 0.0)):
        scores = [reward(e, trivial_reply(policy, e) or "") for e in examples]
        assert statistics.mean(scores) <= ceiling, policy
    stuffed = {e.id: trivial_reply("every rule phrase", e) or "" for e in examples}
    assert all("no_keyword_stuffing" in met(e, stuffed[e.id]) for e in examples)
    assert statistics.mean(reward(e, stuffed[e.id]) for e in examples) <= 0.15
    assert all("no_loops" in met(e, trivial_reply("one sentence looped", e) or "") for e in examples)


LIST_LOOP = (
    "* Call 911 right away: * Stay with him. * Call 911 right away: * Keep him warm. "
    "* Call 911 right away: * Watch him."
)
"""Short list items looped, as the float32 run's held-out replies were: no six words come twice, but four come
three times."""
PLAIN = (
    "Turn off the power at the switch and call 911 right away. If he is not breathing, start CPR and keep "
    "going until help comes. Check him for burns, and call 911 right away again if anything changes."
)
"""A plain answer that says one four-word phrase twice: not a loop."""


def test_a_loop_is_what_the_repetition_metric_counts(examples: list[CriteriaExample]) -> None:
    example = next(e for e in examples if e.id.startswith("held-electric"))
    assert diversity_metrics([LIST_LOOP])["repetition_rate"] == 1.0
    assert "no_loops" in met(example, LIST_LOOP)
    assert diversity_metrics([PLAIN])["repetition_rate"] == 0.0
    assert met(example, PLAIN) & {"no_loops", "no_keyword_stuffing", "no_padding"} == set()
    # the loop earns the help and stay criteria's 3 points, and the pitfall's -6 outweighs them
    assert reward(example, LIST_LOOP) == 0.0 and reward(example, PLAIN) > 0.5


GOOD = {
    "held-electric-0": "Don't go near him until you turn off the power at the switch or unplug it. Then check his "
    "breathing; if he isn't breathing, call 911 and start CPR. Look for burns, and stay with him until help comes.",
    "held-hypothermia-0": "Get him indoors, take off wet clothes and wrap him in dry blankets. Warm him gradually, "
    "and give him a warm drink if he can swallow. Call 911, since confusion is serious, and stay with him.",
    "held-dogbite-0": "Wash the bite with soap and running water for a few minutes, then press a clean dressing "
    "on it to stop the bleeding. See a doctor today, because dog bites often get infected. Keep him calm.",
    "held-asthma-0": "Help him sit upright and give him his blue reliever inhaler, one puff at a time. Stay with "
    "him and keep him calm. If he isn't better after ten puffs, call 911.",
}
"""Plain answers in everyday wording, written by hand rather than from the rules' phrases."""


def test_good_answers_score_high_and_make_no_pitfall(examples: list[CriteriaExample]) -> None:
    index = {e.id: e for e in examples}
    for key, text in GOOD.items():
        assert reward(index[key], text) >= 0.7, (key, met(index[key], text))
        assert not met(index[key], text) & {
            "dangerous_advice",
            "no_loops",
            "no_keyword_stuffing",
            "no_padding",
        }


def test_the_loop_rule_is_fast_on_texts_that_make_it_work_hardest(examples: list[CriteriaExample]) -> None:
    (loop,) = [c for c in examples[0].criteria if c.name == "no_loops"]
    texts = [
        " ".join(f"w{i}" for i in range(500))[:2000],  # no loop: every start scans the whole window
        " ".join(f"one two three x{i}" for i in range(150))[:2000],  # three words again and again, never four
        ("- aa bb cc dd ee\n" * 120)[:2000],
    ]
    for text in texts:
        start = time.perf_counter()
        loop.rule_verdict(text)
        assert time.perf_counter() - start < 0.1, text[:40]


@pytest.mark.parametrize("clip", [True, False])
def test_the_trl_benchmark_rewards_a_reply_as_our_environment_does(clip: bool, tiny_model_dir: Path) -> None:
    """benchmarks/criteria_vs_trl.py gives TRL's arm our reward, clipped or not as the config says."""
    from transformers import AutoTokenizer

    from benchmarks.criteria_vs_trl import _grade
    from envs.criteria.environment import CriteriaEnv
    from rubrics.criteria.autograders.mixed import RuleFirstGrader

    heldout = script().files()[ROOT / "configs/data/first_aid_criteria_heldout.jsonl"]
    example = CriteriaExample.model_validate(heldout[0])
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    env = CriteriaEnv([example], RuleFirstGrader(), tokenizer, clip_reward=clip)

    def ours(text: str) -> float:
        return env.reward_of(asyncio.run(env.grade(example, text)))

    for text in (LIST_LOOP, PLAIN, ""):
        assert _grade({example.id: example}, example.id, text, clip) == ours(text)
    assert ours(LIST_LOOP) == (0.0 if clip else (3 - 6) / 9)  # help 2 + stay 1 - loop 6, of 9 positive
