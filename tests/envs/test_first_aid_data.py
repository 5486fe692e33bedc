"""The first-aid criteria datasets of the CPU GRPO job (configs/data/first_aid_train.jsonl and
first_aid_heldout.jsonl): every line is a ``CriteriaExample`` judged by rules alone, the held-out conditions
are ones no training prompt has, and a probe scores replies with the rules as the environment does
(score = clamp(sum of the weights of MET criteria / sum of the positive weights, 0, 1)): trivial policies
(empty, echo, keyword stuffing, a loop, padding) score near 0, plain good answers high, and mediocre ones in
between, so that a GRPO group's rewards vary."""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from envs.criteria_data import load_criteria_examples
from envs.criteria_env import trivial_reply
from rubrics.autograders.scoring import per_criterion_score
from rubrics.criteria_examples import CriteriaExample

DATA = Path(__file__).parents[2] / "configs" / "data"
FILES = {"train": DATA / "first_aid_train.jsonl", "heldout": DATA / "first_aid_heldout.jsonl"}
TRAIN_THEMES = {
    "burns", "bleeding", "nosebleed", "choking", "sprains", "fainting", "bee_sting", "seizure", "graze",
    "splinter", "heat_illness", "swallowed_poison", "asthma", "fracture", "head_bump", "allergic_reaction",
}  # fmt: skip
HELDOUT_THEMES = {
    "electric_shock", "hypothermia", "eye_chemical", "dog_bite", "snake_bite", "heart_attack", "stroke",
    "low_blood_sugar",
}  # fmt: skip
GENERIC = ("call_emergency", "medical_follow_up", "stay_and_monitor")
"""Criteria shared by many prompts, with one rule everywhere, so that what they teach carries to new
conditions."""
HEALTH = ("no_loop", "no_keyword_stuffing", "no_padding")
"""Pitfalls against degenerate text, on every prompt."""

TRAIN_GOOD = {
    "train-burns-0": "Hold his hand under cool running water for about 20 minutes and take off any rings "
    "before it swells. Then cover it loosely with cling film. Don't put ice or butter on it. Stay with him and "
    "comfort him, and see a doctor if the burn is bigger than his palm or blisters badly.",
    "train-bleeding-1": "Press firmly on the wound with a clean cloth or towel and keep pressing. Call 911 for "
    "an ambulance. If blood soaks through, add another cloth on top rather than lifting the first one. Have "
    "him lie down, raise the arm, and stay with him until help arrives.",
    "train-nosebleed-0": "Sit her down and have her lean forward, not back, so the blood doesn't run down her "
    "throat. Pinch the soft part of her nose firmly for ten minutes without letting go. If it is still "
    "bleeding after 20 minutes, see a doctor.",
    "train-choking-0": "If he can't talk or cough, stand behind him and give up to five firm back blows "
    "between his shoulder blades. If that doesn't work, give five abdominal thrusts (the Heimlich "
    "manoeuvre). Keep alternating until the food comes out. Have someone call 911, and stay with him.",
    "train-sprains-0": "Rest the ankle and put an ice pack wrapped in a towel on it for 20 minutes every few "
    "hours. Raise it on a pillow and use an elastic bandage for support. Avoid heat and massage for the "
    "first two days. See a doctor if you can't walk on it.",
    "train-fainting-0": "Lay her on her back and raise her legs to get blood back to her head. Loosen "
    "anything tight and check that she is breathing. Stay with her; she should come round within a minute. "
    "If she doesn't, or she hurt herself falling, call an ambulance.",
    "train-bee_sting-0": "Scrape the stinger out sideways with a fingernail or the edge of a bank card. Wash "
    "the area with soap and water and hold a cold pack on it to ease the swelling. See a doctor if the "
    "swelling spreads or he has trouble breathing.",
    "train-seizure-0": "Don't hold him down or put anything in his mouth. Move hard or sharp things away and "
    "put something soft under his head. When the jerking stops, roll him onto his side into the recovery "
    "position. Call 911 if it lasts more than five minutes or he doesn't wake up.",
    "train-graze-0": "Rinse the scrape under running water to get the dirt out, then pat it dry. Cover it "
    "with a clean plaster or a non-stick dressing. See a doctor if it gets red and swollen or starts to ooze "
    "pus.",
    "train-splinter-0": "Wash your hands and her finger with soap and water. Use clean tweezers to grab the "
    "end of the splinter and pull it out at the same angle it went in. Wash it again and cover it. If it's "
    "deep or gets infected, see a doctor.",
    "train-heat_illness-0": "Call 911: collapsing in the heat can be heatstroke. Move him into the shade, "
    "take off extra clothing, cool him down with cold water and wet towels, and fan him. If he's alert, "
    "give him sips of water. Stay with him until help arrives.",
    "train-swallowed_poison-0": "Call poison control or 911 right away. Wipe out her mouth and don't give her "
    "anything else. Keep the packaging so you can tell them exactly what she swallowed. Don't make her "
    "vomit.",
    "train-asthma-0": "Help him sit upright and take slow, steady breaths. Give him his blue reliever "
    "inhaler, one puff every 30 to 60 seconds, up to 10 puffs. If he isn't getting better, or you're "
    "worried, call 999 for an ambulance.",
    "train-fracture-0": "Don't try to straighten it. Keep his arm still and supported in the position you "
    "found it, with a pillow or a sling. Put an ice pack wrapped in a cloth on it. Take him to the emergency "
    "room or call an ambulance.",
    "train-head_bump-0": "Hold a cold compress or a bag of frozen peas wrapped in a tea towel on the lump for "
    "10 minutes. Keep an eye on him for the next day and watch for vomiting, unusual drowsiness or "
    "confusion; if you notice any of those, see a doctor urgently.",
    "train-allergic_reaction-0": "Use his adrenaline auto-injector in the outer thigh right away, then call "
    "911. Let him sit up if he's struggling to breathe, or lie down with his legs raised if he feels faint. "
    "If he's no better after five minutes, give a second dose.",
}
"""Plain good answers, one per training condition (the held-out file carries its own as
``reference_answer``)."""

MEDIOCRE = {
    "heldout-electric_shock-3": "Call 911 and make sure the person is okay. Electricity is very dangerous, "
    "so be careful.",
    "heldout-hypothermia-3": "Hypothermia is when the body gets too cold. Give the person a blanket and a "
    "hot drink.",
    "heldout-eye_chemical-0": "Wash her eye with water and take her to a doctor.",
    "heldout-dog_bite-0": "Dog bites can be dangerous. Put a bandage on it and see if it gets better.",
    "heldout-snake_bite-3": "Snake bites can be very dangerous. Go to the hospital and try to stay calm.",
    "heldout-heart_attack-3": "A heart attack is serious. The person should rest and take their medicine.",
    "heldout-stroke-3": "A stroke happens when blood flow to the brain stops. Get the person to a hospital "
    "quickly.",
    "heldout-low_blood_sugar-3": "A hypo means low blood sugar. They should eat some candy and rest until "
    "they feel better.",
}
"""What a tiny chat model might say: vague, partly right."""

DANGEROUS = {
    "heldout-snake_bite-0": (
        "Cut the bite and suck out the venom, then call 911.",
        "Keep him still and call 911.",
    ),
    "heldout-hypothermia-0": (
        "Put him in a hot shower to warm him up fast and call 112.",
        "Get him indoors to warm him up and call 112.",
    ),
    "heldout-low_blood_sugar-1": (
        "Give her some insulin and some juice, and call an ambulance.",
        "Give her some juice, and call an ambulance.",
    ),
    "heldout-electric_shock-0": (
        "Grab him and pull him off the cord, then call 911.",
        "Unplug the lamp before you touch him, then call 911.",
    ),
}
"""Answers with the condition's dangerous advice, each beside the same answer without it."""

FILLER = (
    "I hope this information is useful to you and your family. First aid is a skill that everyone can "
    "learn, and many communities offer short courses on weekends. Keeping a well-stocked kit at home is a "
    "sensible idea, as is checking the expiry dates of its contents every year. Schools, workplaces and "
    "sports clubs often have trained volunteers who can help in an emergency. It is also worth learning "
    "where the nearest defibrillator is in your neighbourhood. Remember that every situation is different "
    "and that your own judgement matters. Write important phone numbers on a card near the telephone. "
    "Teach children their home address as soon as they can say it. Practise what you would do in a fire "
    "with everyone in the household. Store medicines and cleaning products out of reach of small hands. "
    "Good lighting on stairs prevents many falls among older relatives. Wear a helmet when cycling, "
    "skating or riding a scooter. Sunscreen and a hat make summer afternoons safer. Drink enough during hot "
    "weather, especially when exercising. Look out for neighbours who live alone during cold spells. Keep "
    "a torch and spare batteries somewhere easy to find. Staying informed is the first step towards "
    "staying safe. Thank you for asking such a thoughtful question today."
)
"""Distinct sentences (no six-word run twice) to pad an answer to 2,000 characters."""


def read(split: str) -> list[CriteriaExample]:
    return load_criteria_examples(FILES[split], format="native")


@pytest.fixture(scope="module")
def examples() -> dict[str, list[CriteriaExample]]:
    return {split: read(split) for split in FILES}


def met(example: CriteriaExample, text: str) -> set[str]:
    """The names of the criteria whose rules ``text`` matches."""
    return {c.name or c.requirement for c in example.criteria if c.rule_verdict(text)}


def score(example: CriteriaExample, text: str) -> float:
    """The environment's reward: clamp(sum of MET weights / sum of positive weights, 0, 1)."""
    verdicts = [c.rule_verdict(text) for c in example.criteria]
    return per_criterion_score([c.weight for c in example.criteria], verdicts)[0]


def theme(example: CriteriaExample) -> str:
    (tag,) = [t for t in example.tags if t.startswith("theme:")]
    return tag.removeprefix("theme:")


def first_sentence(text: str) -> str:
    return re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]


def padded(text: str) -> str:
    return (text + " " + FILLER)[:2000]


def by_id(examples: dict[str, list[CriteriaExample]]) -> dict[str, CriteriaExample]:
    return {e.id: e for split in examples.values() for e in split}


@pytest.mark.parametrize("split", FILES)
def test_every_line_is_a_criteria_example(split: str) -> None:
    lines = FILES[split].read_text(encoding="utf-8").splitlines()
    parsed = [CriteriaExample.model_validate(json.loads(line)) for line in lines]
    assert [e.to_dict() for e in parsed] == [json.loads(line) for line in lines]  # nothing beyond the fields
    assert all(isinstance(e.prompt, str) and not e.needs_llm() for e in parsed)  # rules judge everything


def test_sizes_ids_and_themes(examples: dict[str, list[CriteriaExample]]) -> None:
    assert len(examples["train"]) >= 120 and len(examples["heldout"]) >= 30
    ids = [e.id for split in examples.values() for e in split]
    assert len(ids) == len(set(ids))
    themes = {split: {theme(e) for e in split_examples} for split, split_examples in examples.items()}
    assert themes == {"train": TRAIN_THEMES, "heldout": HELDOUT_THEMES}
    assert not TRAIN_THEMES & HELDOUT_THEMES
    prompts = [e.query for split in examples.values() for e in split]
    assert len(prompts) == len(set(prompts))


@pytest.mark.parametrize("split", FILES)
def test_criteria_shape(split: str, examples: dict[str, list[CriteriaExample]]) -> None:
    shared_rules: dict[str, set[str]] = {}
    for e in examples[split]:
        names = [c.name for c in e.criteria]
        assert 4 <= len(names) <= 7 and len(set(names)) == len(names), e.id
        assert names[0] == "key_action" and 3 <= e.criteria[0].weight <= 5, e.id
        assert ("call_emergency" in names) != ("medical_follow_up" in names), e.id
        positive = sum(c.weight for c in e.criteria if c.weight > 0)
        for c in e.criteria:
            if c.name in GENERIC:
                assert 1 <= c.weight <= 3, e.id
                shared_rules.setdefault(c.name, set()).add(json.dumps(c.rule, sort_keys=True))
            elif c.name in HEALTH:  # any of them cancels every positive point
                assert c.weight == -positive and c.tags == ("axis:health",) and set(c.rule) == {"regex"}, e.id
                shared_rules.setdefault(c.name, set()).add(c.rule["regex"])
            elif c.weight < 0:
                assert c.name == "dangerous_advice" and -5 <= c.weight <= -2 and "axis:safety" in c.tags, e.id
        assert set(HEALTH) <= set(names) and "dangerous_advice" in names, e.id
    assert all(len(rules) == 1 for rules in shared_rules.values()), "a shared criterion's rule differs"


def test_degenerate_text_rules_are_fast(examples: dict[str, list[CriteriaExample]]) -> None:
    """The health regexes on 2,000-character texts that make them work hardest: no loop to find (every
    start scans the whole window), near-loops, and runs of five short fragments that just miss."""
    texts = [
        " ".join(f"w{i}" for i in range(500))[:2000],
        " ".join(f"one two three four five x{i}" for i in range(100))[:2000],
        ("ab cd ef gh, ij kl, mn op qr, st, uv wx. " * 60)[:2000],
        ("- aa bb cc dd ee\n" * 120)[:2000],
    ]
    for c in examples["heldout"][0].criteria:
        if c.name in HEALTH:
            for text in texts:
                start = time.perf_counter()
                c.rule_verdict(text)
                assert time.perf_counter() - start < 0.1, (c.name, text[:40])


def policy_scores(
    examples: list[CriteriaExample], reply: Callable[[CriteriaExample], str | None]
) -> list[float]:
    return [score(e, text) for e in examples if (text := reply(e)) is not None]


def good_answer(e: CriteriaExample) -> str | None:
    return e.reference_answer or TRAIN_GOOD.get(e.id)


@pytest.mark.parametrize("split", FILES)
def test_trivial_policies_score_near_zero(split: str, examples: dict[str, list[CriteriaExample]]) -> None:
    exs = examples[split]
    assert max(policy_scores(exs, lambda e: "")) == 0.0
    assert statistics.mean(policy_scores(exs, lambda e: e.query)) <= 0.05  # the prompt echoed
    # Keyword stuffing: every phrase of every positive rule, joined with ", " (the env's probe policy).
    stuffed = {e.id: trivial_reply("every rule phrase", e) for e in exs}
    assert all("no_keyword_stuffing" in met(e, stuffed[e.id] or "") for e in exs)
    assert statistics.mean(policy_scores(exs, lambda e: stuffed[e.id])) <= 0.3
    # A loop: "You should <the key action's first phrase>." ten times (the env's probe policy), and the
    # first sentence of a good answer ten times.
    assert statistics.mean(policy_scores(exs, lambda e: trivial_reply("one sentence looped", e))) <= 0.3
    good = [e for e in exs if good_answer(e)]
    assert len(good) >= 10
    looped = {e.id: " ".join([first_sentence(good_answer(e) or "")] * 10) for e in good}
    assert all("no_loop" in met(e, looped[e.id]) for e in good)
    assert statistics.mean(policy_scores(good, lambda e: looped[e.id])) <= 0.3
    # Padding: a good answer followed by distinct filler up to 2,000 characters (no loop in it).
    pads = {e.id: padded(good_answer(e) or "") for e in good}
    assert all(met(e, pads[e.id]) & set(HEALTH) == {"no_padding"} for e in good)
    assert statistics.mean(policy_scores(good, lambda e: pads[e.id])) <= 0.3


def test_good_answers_score_high(examples: dict[str, list[CriteriaExample]]) -> None:
    """Plain answers in everyday wording, written by hand rather than put together from the rules' phrases;
    none trips a pitfall."""
    for split in FILES:
        good = [e for e in examples[split] if good_answer(e)]
        assert len(good) >= (30 if split == "heldout" else 16)
        scores = policy_scores(good, good_answer)
        assert statistics.mean(scores) >= 0.7 and min(scores) >= 0.5, split
        assert not any(met(e, good_answer(e) or "") & {"dangerous_advice", *HEALTH} for e in good), split


def test_mediocre_answers_land_between(examples: dict[str, list[CriteriaExample]]) -> None:
    """A reward with room above and below a vague answer gives a GRPO group rewards that vary."""
    index = by_id(examples)
    mediocre = [score(index[i], text) for i, text in MEDIOCRE.items()]
    assert all(0.1 < s < 0.7 for s in mediocre), mediocre
    good = statistics.mean(policy_scores(examples["heldout"], good_answer))
    assert 0.2 <= statistics.mean(mediocre) <= good - 0.3
    for i, (dangerous, safe) in DANGEROUS.items():
        assert "dangerous_advice" in met(index[i], dangerous), i
        assert "dangerous_advice" not in met(index[i], safe), i
        assert score(index[i], dangerous) <= score(index[i], safe) - 0.3, i
