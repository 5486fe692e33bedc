"""The shipped examples: first_responder and incident_triage, with their scenarios."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rubrics.judges.matching import rule_matches
from rubrics.multistep import MultiStepRubric, Scenario, ground_truth_walk, load_rubric, load_scenarios
from rubrics.multistep.judging import rule_phrases
from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ["first_responder", "incident_triage"]
IDEALS = yaml.safe_load((ROOT / "tests/data/ideal_replies.yaml").read_text())


def load(name: str) -> tuple[MultiStepRubric, list[Scenario]]:
    rubric = load_rubric(ROOT / f"configs/rubrics/{name}.yaml")
    return rubric, load_scenarios(ROOT / f"configs/scenarios/{name}.yaml", rubric)


def test_first_responder_shape() -> None:
    rubric, scenarios = load("first_responder")
    assert rubric.roots == ["scene_safety"]
    assert len(rubric.requirements) >= 20 and rubric.graph.depth >= 6
    assert len(scenarios) >= 8
    assert not rubric.graph.unreachable
    for req in rubric.requirements:  # runs offline (rules) and with a real judge model (question)
        assert req.rules and req.question.strip()
    assert {"rules", "llm"} <= set(rubric.judges)
    branching = [
        r
        for r in rubric.requirements
        if r.kind == "binary" and len([v for v in r.dependencies.values() if v]) == 2
    ]
    assert len(branching) >= 3  # both answers lead on
    with_reveals = [s for s in scenarios if s.revealed_info]
    assert len(with_reveals) == len(scenarios)


@pytest.mark.parametrize("name", EXAMPLES)
def test_scenarios_cover_every_branch(name: str) -> None:
    rubric, scenarios = load(name)
    taken: dict[str, set] = {}
    for s in scenarios:
        walk = ground_truth_walk(rubric.graph, s.answers)
        assert walk.stop_reason == "terminal", f"{s.name}: ground truth missing on its path"
        assert {r.name for r in walk.results} == set(s.answers), f"{s.name}: answers off its path"
        for r in walk.results:
            taken.setdefault(r.name, set()).add(r.truth)
    for req in rubric.requirements:
        assert req.name in taken, f"{req.name} is on no scenario's path"
        for key in req.dependencies:
            assert any(req.is_correct(t, key) for t in taken[req.name]), (
                f"{req.name}: branch {key!r} is taken by no scenario"
            )


@pytest.mark.parametrize("name", EXAMPLES)
async def test_an_ideal_reply_satisfies_the_whole_path_with_rule_judges(name: str) -> None:
    rubric, scenarios = load(name)
    for s in scenarios:
        result = await rubric.evaluate(s, IDEALS[name][s.name])
        assert result.stop_reason == "terminal", (
            s.name,
            [(r.name, r.answer, r.truth) for r in result.results if not r.correct],
        )
        assert rubric.reward(result, s.answers) == pytest.approx(1.0)


@pytest.mark.parametrize("name", EXAMPLES)
async def test_keyword_spam_does_not_win(name: str) -> None:
    """A reply listing every rule phrase (keyword gaming) scores poorly."""
    rubric, scenarios = load(name)
    spam = " ".join(p for r in rubric.requirements for phrases in rule_phrases(r).values() for p in phrases)
    rewards = [rubric.reward(await rubric.evaluate(s, spam), s.answers) for s in scenarios]
    assert sum(rewards) / len(rewards) < 0.35


@pytest.mark.parametrize("name", EXAMPLES)
def test_reveals_sit_on_the_path(name: str) -> None:
    rubric, scenarios = load(name)
    for s in scenarios:
        path = {r.name for r in ground_truth_walk(rubric.graph, s.answers).results}
        assert set(s.revealed_info) <= path


def test_the_first_phrase_of_each_answer_says_that_answer_alone() -> None:
    """``rule_phrases``' canonical phrase satisfies its own answer's rule and no earlier one (the probe says it).
    first_responder only: incident_triage's rules combine ``all`` phrases and patterns its first phrase lacks."""
    rubric, _ = load("first_responder")
    for req in rubric.requirements:
        for value, phrases in rule_phrases(req).items():
            if not phrases:
                continue
            first = next((v for v, spec in req.rules.items() if rule_matches(spec, phrases[0])), None)
            assert first == value, (req.name, value, phrases[0], first)


# ---------------------------------------------------------------- the composed first_responder splits

MAX_TURNS = 5
"""The most replies a perfect policy needs on any shipped first_responder scenario (env.max_turns)."""
MAX_REPLY_TOKENS = 110
"""The longest ideal reply, in SmolLM2 tokens, must fit in this (rollout.max_tokens)."""


def _composed() -> list[tuple[str, dict[str, Any]]]:
    compose = load_script("compose_scenarios")
    parts = compose.load_parts()
    return [(split, s) for split in compose.SPLITS for s in compose.compose(parts, split)]


COMPOSED = _composed()


async def play(rubric: MultiStepRubric, scenario: Scenario, replies: list[str]) -> tuple[Any, int]:
    """Drive ``replies`` through a walk the way the progressive-reveal environment does: each reply is judged
    alone after the conversation so far, and what it reveals is the next user message."""
    walk = rubric.walk(scenario.answers, scenario.revealed_info)
    messages: list[dict[str, str]] = [{"role": "user", "content": str(scenario.prompt)}]
    for turn, reply in enumerate(replies):
        advance = await walk.advance(list(messages), [{"role": "assistant", "content": reply}], turn)
        messages.append({"role": "assistant", "content": reply})
        if advance.done:
            return walk, turn + 1
        assert advance.reveals, f"turn {turn}: the walk waits but reveals nothing"
        messages.append({"role": "user", "content": "\n\n".join(advance.reveals)})
    return walk, len(replies)


@pytest.mark.parametrize(("split", "data"), COMPOSED, ids=[f"{sp}-{d['name']}" for sp, d in COMPOSED])
async def test_ideal_turns_reach_reward_one_through_the_progressive_reveal(split: str, data: dict) -> None:
    rubric, _ = load("first_responder")
    replies = data["ideal_turns"]
    scenario = Scenario(**{k: v for k, v in data.items() if k != "ideal_turns"})
    walk, turns = await play(rubric, scenario, replies)
    wrong = [(r.name, r.answer, r.truth, r.turn) for r in walk.result.results if not r.correct]
    assert not wrong and walk.done and walk.stop_reason == "terminal", (wrong, walk.frontier)
    assert turns == len(replies) <= MAX_TURNS, "every ideal reply is needed, and no more than MAX_TURNS"
    ideal_path = ground_truth_walk(rubric.graph, scenario.answers).path
    assert sorted(walk.result.path) == sorted(ideal_path)
    assert rubric.reward(walk.result, scenario.answers) == pytest.approx(1.0)


async def test_the_ideal_turn_check_can_fail() -> None:
    """Swapping two turns of a scenario's ideal replies breaks its walk."""
    rubric, _ = load("first_responder")
    _, data = next((sp, d) for sp, d in COMPOSED if len(d["ideal_turns"]) >= 4)
    scenario = Scenario(**{k: v for k, v in data.items() if k != "ideal_turns"})
    replies = list(data["ideal_turns"])
    replies[1], replies[2] = replies[2], replies[1]
    walk, _ = await play(rubric, scenario, replies)
    assert rubric.reward(walk.result, scenario.answers) < 0.5


def test_ideal_replies_fit_the_token_budget() -> None:
    tokenizers = pytest.importorskip("tokenizers")
    path = ROOT / "models/SmolLM2-135M-Instruct/tokenizer.json"
    if not path.exists():
        pytest.skip("SmolLM2 is not installed (./install.sh)")
    tokenizer = tokenizers.Tokenizer.from_file(str(path))
    longest = max(len(tokenizer.encode(r).ids) for _, d in COMPOSED for r in d["ideal_turns"])
    assert longest <= MAX_REPLY_TOKENS
