"""The first_responder rule judges accept the ordinary ways of saying an answer, and only that answer.

For every requirement, a few paraphrases of each answer value: each must be judged as that value, so a
paraphrase of the right answer passes and a paraphrase of the wrong answer fails (negated forms included:
"the scene is not safe" is not "the scene is safe")."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from rubrics.judges.matching import (
    asserted,
    check_rule_spec,
    denied,
    inflections,
    phrase_pattern,
    rule_matches,
)
from rubrics.multistep import MultiStepRubric, RuleRequirementJudge, load_rubric
from rubrics.multistep.judging import rule_phrases

ROOT = Path(__file__).resolve().parents[3]
RUBRIC = load_rubric(ROOT / "configs/rubrics/first_responder.yaml")

PARAPHRASES: dict[str, dict[Any, list[str]]] = {
    "scene_safety": {
        1.0: [
            "The scene is safe.",
            "Scene looks safe, so we go in.",
            "It's safe to approach the patient.",
            "There are no hazards here; I walk up to the patient.",
            "The area appears safe.",
        ],
        0.0: [
            "The scene is not safe.",
            "This scene is unsafe, I stay back.",
            "It isn't safe to enter yet.",
            "I stage at a safe distance until it is controlled.",
            "Not safe to approach: we wait.",
        ],
    },
    "hazard_type": {
        0: [
            "There is an armed man; we wait for police to secure the scene.",
            "Violent scene with a gun, I stage and wait for law enforcement.",
            "A suspect with a knife is still there: officers must clear it first.",
        ],
        1: [
            "Traffic is still moving, I call the fire department to block the lanes.",
            "Fuel is leaking from the car, so fire and rescue has to make it safe.",
            "The car is burning; I request a fire engine.",
        ],
        2: [
            "Power lines are down; I call the power company.",
            "Gas leak: the gas company and fire department must shut it off and meter the air.",
            "A chemical spill, I call the hazmat team.",
        ],
    },
    "bsi_ppe": {
        1.0: [
            "I put on gloves.",
            "Gloves and eye protection on.",
            "BSI before I touch him.",
            "I don my PPE first.",
        ],
        0.0: [
            "I go straight to the patient.",
            "No gloves needed, I start the assessment.",
            "I don't put on gloves.",
        ],
    },
    "patient_responsive": {
        1.0: [
            "He is responsive.",
            "She's alert.",
            "The patient responds to voice.",
            "He is awake and talking to me.",
            "Alert and oriented, A on AVPU.",
            "She responded to my voice.",
            "He is conscious.",
        ],
        0.0: [
            "He is unresponsive.",
            "She is not responsive.",
            "The patient does not respond to voice.",
            "He responds only to pain, P on AVPU.",
            "She is unconscious.",
            "He is not conscious.",
            "He isn't responsive to voice.",
        ],
    },
    "breathing_adequate": {
        1.0: [
            "He is breathing adequately.",
            "Her breathing is adequate.",
            "She is breathing normally.",
            "Adequate respirations at 16 with good chest rise.",
        ],
        0.0: [
            "He is not breathing.",
            "Only agonal gasps.",
            "She isn't breathing normally.",
            "Breathing is inadequate, 4 a minute.",
            "He is apneic.",
            "Respiratory depression.",
        ],
    },
    "pulse_present": {
        1.0: [
            "He has a pulse.",
            "A pulse is present.",
            "I feel a slow pulse of 56.",
            "Weak carotid pulse present.",
            "There is a palpable pulse.",
        ],
        0.0: [
            "There is no pulse.",
            "He is pulseless.",
            "I can't feel a pulse.",
            "No palpable pulse.",
            "Pulse is absent: cardiac arrest.",
        ],
    },
    "shockable_rhythm": {
        1.0: [
            "Shock advised, I deliver the shock.",
            "The AED advises a shock; I defibrillate.",
            "It's ventricular fibrillation, a shockable rhythm.",
            "Shock delivered, CPR resumed.",
        ],
        0.0: [
            "No shock advised, resume CPR.",
            "The rhythm is non-shockable.",
            "Asystole, so I continue compressions.",
            "The AED does not advise a shock.",
            "It's not shockable.",
        ],
    },
    "rosc_achieved": {
        1.0: [
            "We have ROSC.",
            "His pulse has returned.",
            "Return of spontaneous circulation.",
            "She regained a pulse.",
        ],
        0.0: [
            "No ROSC.",
            "He remains pulseless, CPR continues.",
            "Still no pulse, we continue CPR.",
            "There is no return of spontaneous circulation.",
        ],
    },
    "naloxone_indicated": {
        1.0: [
            "I ventilate with a BVM and give naloxone.",
            "Bag-valve-mask ventilations and Narcan 4 mg intranasal.",
            "I give naloxone while ventilating.",
        ],
        0.0: [
            "I ventilate with the BVM and withhold naloxone.",
            "Ventilating; naloxone is not indicated.",
            "I assist her breathing with a bag-valve-mask; this is not an opioid overdose, so no naloxone.",
            "I ventilate and do not give naloxone.",
        ],
    },
    "trauma_mechanism": {
        1.0: [
            "This is a trauma patient.",
            "Significant mechanism of injury.",
            "It's a trauma call.",
            "Penetrating trauma from the stab wound.",
        ],
        0.0: [
            "This is a medical patient.",
            "A medical call, no trauma.",
            "No injury: it's a medical problem.",
            "Nature of illness: chest pain.",
        ],
    },
    "severe_bleeding": {
        1.0: [
            "He has life-threatening bleeding.",
            "Severe bleeding from the thigh.",
            "Arterial bleeding, spurting.",
            "She is bleeding heavily from the groin.",
        ],
        0.0: [
            "No life-threatening bleeding.",
            "Only minor bleeding from the scalp.",
            "The bleeding is not life-threatening.",
            "There is no severe bleeding.",
        ],
    },
    "tourniquet_applicable": {
        1.0: [
            "I apply a tourniquet high and tight.",
            "Tourniquet applied 2-3 inches above the wound, time noted.",
            "I applied a tourniquet high and tight and noted the time.",
        ],
        0.0: [
            "I pack the wound with hemostatic gauze and hold direct pressure.",
            "Junctional wound: no tourniquet, I pack it and hold firm pressure.",
            "A tourniquet won't work in the groin, so I packed the wound and held direct pressure.",
        ],
    },
    "spinal_motion_restriction": {
        1.0: [
            "I apply spinal motion restriction.",
            "Manual in-line stabilization and a cervical collar.",
            "I put a c-collar on him.",
            "We hold c-spine and apply a collar.",
        ],
        0.0: [
            "No spinal motion restriction.",
            "He does not need spinal motion restriction.",
            "No need for a cervical collar.",
            "I don't apply a c-collar: NEXUS negative.",
        ],
    },
    "medical_complaint": {
        0: [
            "Possible acute coronary syndrome.",
            "I think he's having a heart attack.",
            "Cardiac chest pain, possible ACS.",
        ],
        1: ["Possible stroke.", "She has a focal deficit, a suspected stroke.", "Signs of a stroke."],
        2: [
            "Altered mental status.",
            "He is confused with no focal deficit.",
            "Altered level of consciousness.",
        ],
    },
    "aspirin_indicated": {
        1.0: ["I give 324 mg of chewable aspirin.", "He chews four baby aspirin.", "Aspirin 324 mg given."],
        0.0: [
            "I withhold aspirin because of her allergy.",
            "She is allergic to aspirin, so no aspirin.",
            "Aspirin is contraindicated.",
            "I do not give aspirin.",
        ],
    },
    "blood_glucose_low": {
        1.0: [
            "She is hypoglycemic.",
            "Low blood sugar, 42.",
            "His blood glucose is low.",
            "Hypoglycemia at 31 mg/dL.",
        ],
        0.0: [
            "Blood glucose is normal.",
            "Normal blood sugar, 112.",
            "He is not hypoglycemic.",
            "Glucose 104, which rules out hypoglycemia.",
        ],
    },
    "oral_glucose_safe": {
        1.0: [
            "She can swallow, so I give oral glucose.",
            "He protects his airway; I give glucose gel.",
            "Oral glucose since she is swallowing normally.",
        ],
        0.0: [
            "He cannot swallow, so I give IM glucagon.",
            "Nothing by mouth; glucagon IM.",
            "She is unable to swallow safely: IV dextrose by ALS.",
        ],
    },
    "stroke_scale_positive": {
        1.0: [
            "Positive stroke scale.",
            "Cincinnati: facial droop and arm drift.",
            "Her face droops and her arm drifts.",
            "The FAST exam is positive with slurred speech.",
        ],
        0.0: [
            "Negative stroke scale.",
            "Cincinnati stroke scale is negative.",
            "No facial droop, no arm drift, speech clear.",
            "No focal deficits.",
        ],
    },
    "last_known_well_window": {
        1.0: [
            "Last known well 50 minutes ago, within the treatment window.",
            "Last seen normal at 9:10, so she is inside the window.",
            "LKW 40 minutes ago: time-critical.",
        ],
        0.0: [
            "Last known well Saturday, outside the treatment window.",
            "Last known well more than 24 hours ago, beyond the window.",
            "Last seen normal two days ago, so he is not within the window.",
        ],
    },
    "vital_signs_abnormal": {
        1.0: [
            "BP 84/56: she is hypotensive.",
            "Heart rate 128, tachycardic, signs of shock.",
            "His vitals are abnormal.",
            "Vital signs are not stable: BP 78/40.",
        ],
        0.0: [
            "Vital signs are stable.",
            "Vitals are within normal limits, BP 134/82.",
            "HR 84 and BP 130/80: stable vitals.",
            "Normal vital signs, no signs of shock.",
        ],
    },
    "transport_priority": {
        0: [
            "Non-emergent transport.",
            "Routine transport without lights and sirens.",
            "We transport non-emergently, no lights and sirens.",
        ],
        1: [
            "Emergent transport to the closest hospital.",
            "Rapid transport to the nearest emergency department.",
            "Lights and sirens to the closest ED.",
        ],
        2: [
            "Emergent transport to the trauma center.",
            "Rapid transport to a stroke center.",
            "Lights and sirens to the PCI-capable cardiac center.",
        ],
    },
    "specialty_destination": {
        0: ["To the trauma center with a trauma alert.", "Level 1 trauma center."],
        1: ["Stroke center with a stroke alert.", "To the comprehensive stroke center."],
        2: ["PCI center with a STEMI alert.", "Straight to the cath lab."],
    },
}
"""Requirement -> answer value -> replies that say that answer (and nothing that says another)."""

CASES = [
    (name, value, text)
    for name, by_value in PARAPHRASES.items()
    for value, texts in by_value.items()
    for text in texts
]


def judged(name: str, text: str) -> Any:
    requirement = RUBRIC.graph.requirements[name]
    return asyncio.run(RuleRequirementJudge().judge_for(requirement)(None, text, None)).answer


def test_every_requirement_and_answer_has_paraphrases() -> None:
    for req in RUBRIC.requirements:
        assert req.name in PARAPHRASES, req.name
        assert {req.validate_answer(v) for v in PARAPHRASES[req.name]} == {
            req.validate_answer(v) for v in req.rules
        }, req.name


@pytest.mark.parametrize(("name", "value", "text"), CASES)
def test_a_paraphrase_of_the_right_answer_passes(name: str, value: Any, text: str) -> None:
    requirement = RUBRIC.graph.requirements[name]
    answer = judged(name, text)
    assert answer is not None and requirement.is_correct(answer, value), (name, value, text, answer)


@pytest.mark.parametrize(("name", "value", "text"), CASES)
def test_a_paraphrase_of_a_wrong_answer_fails(name: str, value: Any, text: str) -> None:
    requirement = RUBRIC.graph.requirements[name]
    answer = judged(name, text)
    for truth in requirement.rules:
        if not requirement.is_correct(truth, value):
            assert answer is None or not requirement.is_correct(answer, truth), (name, truth, text, answer)


@pytest.mark.parametrize(
    ("name", "said", "denied"),
    [
        ("scene_safety", "The scene is safe.", "The scene is not safe."),
        ("scene_safety", "It is safe to enter.", "It is not safe to enter."),
        ("patient_responsive", "He responds to voice.", "He does not respond to voice."),
        ("breathing_adequate", "She is breathing adequately.", "She is not breathing adequately."),
        ("pulse_present", "Pulse present.", "No pulse present."),
        ("pulse_present", "He has a palpable pulse.", "There is no palpable pulse."),
        ("severe_bleeding", "Severe bleeding from the leg.", "No severe bleeding from the leg."),
        ("spinal_motion_restriction", "Spinal motion restriction.", "Without spinal motion restriction."),
        (
            "naloxone_indicated",
            "I ventilate with a BVM and give naloxone.",
            "I ventilate with a BVM and never give naloxone.",
        ),
        (
            "transport_priority",
            "Transport with lights and sirens to the closest hospital.",
            "Transport without lights and sirens to the closest hospital.",
        ),
    ],
)
def test_negating_an_answer_turns_it_around(name: str, said: str, denied: str) -> None:
    requirement = RUBRIC.graph.requirements[name]
    first, second = judged(name, said), judged(name, denied)
    assert first is not None and first != second, (said, first, denied, second)
    assert second is None or not requirement.is_correct(second, first)


def test_rubric_loads_with_the_rules() -> None:
    assert isinstance(RUBRIC, MultiStepRubric) and len(CASES) > 150


# ---------------------------------------------------------------- the matching rules themselves


@pytest.mark.parametrize(
    ("phrase", "text"),
    [
        ("apply a tourniquet", "I applied a tourniquet"),
        ("apply a tourniquet", "applying a tourniquet now"),
        ("tourniquet", "two tourniquets"),
        ("applied a tourniquet", "I apply a tourniquet"),
        ("respond to voice", "she responded to voice"),
        ("responds to voice", "he is responding to voice"),
        ("stage", "we are staging down the road"),
        ("stop", "the bleeding stopped"),
        ("gloves", "gloved up"),
    ],
)
def test_phrase_words_match_their_inflections(phrase: str, text: str) -> None:
    assert asserted(phrase, text)


def test_inflection_keeps_whole_words() -> None:
    assert inflections("is") == ["is"]
    assert not asserted("ems", "I check the items")
    assert not asserted("pulse", "impulses")
    ems = phrase_pattern("ems", inflect=False)
    assert ems.search("EMS is here") and not ems.search("items")


@pytest.mark.parametrize(
    ("phrase", "text", "said"),
    [
        ("scene is safe", "The scene is safe.", True),
        ("safe", "The scene is not safe.", False),
        ("safe to enter", "It isn't safe to enter.", False),
        ("scene is safe", "No hazards, the scene is safe.", True),  # the comma ends the negation
        ("pulseless", "He is not breathing and pulseless.", True),  # so does "and"
        ("severe bleeding", "I don't see any severe bleeding.", False),
        ("scene is safe", "I do not think the scene is safe.", False),  # four words back: negated
        ("safe", "not one two three four safe", True),  # five words back: too far
        ("lights and sirens", "transport without lights and sirens", False),
        ("shockable rhythm", "a non-shockable rhythm", False),
        ("no pulse", "There is no pulse.", True),  # a phrase that starts with a negator is matched as written
    ],
)
def test_a_negated_phrase_is_not_said(phrase: str, text: str, said: bool) -> None:
    assert asserted(phrase, text) is said
    assert denied(phrase, text) is (not said)


def test_negated_rule_key_matches_a_denial() -> None:
    spec = {"negated": ["safe"]}
    assert rule_matches(spec, "It is not safe.") and not rule_matches(spec, "It is safe.")
    either = {"any": ["unsafe"], "negated": ["safe"]}
    assert (
        rule_matches(either, "unsafe")
        and rule_matches(either, "never safe")
        and not rule_matches(either, "safe")
    )
    assert not rule_matches({"none": ["gloves"]}, "gloves on") and rule_matches(
        {"none": ["gloves"]}, "no gloves"
    )
    # a regex matches as written: negators never change an author's pattern
    assert rule_matches({"regex": r"\bweapons?\b"}, "no weapons seen")
    assert rule_matches({"regex": r"\bweapons?\b"}, "he has a weapon")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"negate": ["safe"]}, "unknown key 'negate'"),
        ({"negated": []}, "'negated' must be a non-empty list"),
        ({"negated": "safe"}, "'negated' must be a non-empty list"),
        ({"any": ["safe", " "]}, "'any' must be a non-empty list"),
        ({"regex": "("}, "does not compile"),
    ],
)
def test_rule_specs_stay_strict(spec: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_rule_spec("scene_safety", 1.0, spec)


def test_rule_phrases_lists_any_then_all_with_the_canonical_first() -> None:
    phrases = rule_phrases(RUBRIC.graph.requirements["patient_responsive"])
    assert phrases[1.0][0] == "the patient is responsive" and phrases[0.0][0] == "the patient is unresponsive"
    assert "unresponsive" not in phrases[1.0]  # 'none' phrases are not things to say
    req = RUBRIC.graph.requirements["pulse_present"]
    assert set(rule_phrases(req)) == set(req.rules)
