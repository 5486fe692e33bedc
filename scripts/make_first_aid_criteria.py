"""Write the first-aid criteria datasets of configs/train/criteria_cpu.yaml: lay people's first-aid questions,
each with its own rule-judged criteria (configs/data/first_aid_criteria_train.jsonl, 16 conditions x 8
wordings; configs/data/first_aid_criteria_heldout.jsonl, 8 conditions no training prompt has x 4).

Each prompt has a key action (+4) and a second action (+2) of its condition, two generic criteria shared by
every prompt so that learning can carry to new conditions (get medical help +2; stay with and watch the
person +1), the condition's dangerous advice (-4), and three pitfalls against degenerate text on every
prompt: a loop (the same six words twice, or four words three times, as in short list items looped, -6),
keyword stuffing (six short comma-separated fragments in a row, -8) and padding (over 1,200 characters, -4).
Phrases match as the multi-step rules do (rubrics/multistep/judging.py: whole words, inflections,
negation-aware), so "do not put ice" does not say "put ice".

    .venv/bin/python scripts/make_first_aid_criteria.py
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HELP = {
    "name": "seek_help",
    "weight": 2,
    "requirement": "Says when or how to get medical help (emergency services, a doctor, a pharmacist)",
    "tags": ["axis:completeness"],
    "rule": {
        "any": [
            "call 911",
            "call 999",
            "call 112",
            "emergency services",
            "emergency number",
            "ambulance",
            "see a doctor",
            "doctor",
            "hospital",
            "medical attention",
            "medical help",
            "urgent care",
            "emergency room",
            "pharmacist",
            "nurse",
            "poison control",
            "paramedics",
        ]
    },
}
CARE = {
    "name": "stay_and_watch",
    "weight": 1,
    "requirement": "Says to stay with the person, keep them calm, or watch for signs of getting worse",
    "tags": ["axis:completeness"],
    "rule": {
        "any": [
            "stay with",
            "stay calm",
            "keep calm",
            "keep them calm",
            "keep him calm",
            "keep her calm",
            "reassure",
            "monitor",
            "keep an eye",
            "watch for",
            "check on",
            "comfort",
        ]
    },
}
LOOP = {
    "name": "no_loops",
    "weight": -6,
    "requirement": "Repeats the same run of six or more words, or of four words three times (a loop)",
    "tags": ["axis:health"],
    "rule": {
        "regex": r"\b(\w+(?:\W+\w+){5})\b[\s\S]{0,1500}?\b\1\b"
        r"|\b(\w+(?:\W+\w+){3})\b(?:[\s\S]{0,600}?\b\2\b){2}"
    },
}
STUFF = {
    "name": "no_keyword_stuffing",
    "weight": -8,
    "requirement": (
        "Strings six or more short comma-separated fragments together instead of explaining "
        "(keyword stuffing)"
    ),
    "tags": ["axis:health"],
    "rule": {"regex": r"(?:[^,.;:!?\n]{1,30},\s*){5,}"},
}
PAD = {
    "name": "no_padding",
    "weight": -4,
    "requirement": "Is padded far beyond what the question needs (over 1,200 characters)",
    "tags": ["axis:health"],
    "rule": {"regex": r"^[\s\S]{1200,}$"},
}
TRAIN_CONDITIONS = {
    # theme: (key phrases, key requirement, second phrases, second requirement, danger phrases,
    # danger requirement, prompts)
    "burns": (
        ["cool water", "cold water", "running water", "under the tap", "cool the burn", "run it under water"],
        "Cool the burn under cool running water",
        ["cover", "cling film", "clean dressing", "loosely", "non-stick"],
        "Cover it loosely with a clean dressing or cling film",
        ["butter", "ice", "toothpaste", "pop the blister"],
        "Puts butter, ice or toothpaste on the burn, or pops blisters",
        [
            "My {p} just burned {pos} hand on the stove. What should I do?",
            "I spilled boiling water on my {part}. How do I treat it?",
            "{P} touched a hot pan and {pr} fingers are red and painful. What now?",
            "I burned my arm on the oven door. What first aid should I do?",
            "Hot coffee spilled on my {p}'s leg. What should we do?",
            "How do I treat a small burn from a curling iron?",
            "My {p} got a steam burn from the kettle. Help?",
            "What's the first aid for a burn from a hot pot handle?",
        ],
    ),
    "bleeding": (
        ["pressure", "press", "firm pressure", "press down"],
        "Press firmly on the wound to stop the bleeding",
        ["clean cloth", "bandage", "dressing", "gauze", "towel"],
        "Uses a clean cloth, gauze or bandage on the wound",
        ["remove the cloth", "peek", "lift the cloth", "tourniquet on the neck"],
        "Lifts the cloth to check, or other harmful advice",
        [
            "My {p} cut {pos} arm on glass and it's bleeding a lot. What do I do?",
            "I sliced my finger while cooking and it won't stop bleeding.",
            "{P} has a deep cut on {pr} leg. How do I stop the bleeding?",
            "A coworker cut his hand on a box cutter. What first aid?",
            "My {p} fell and has a bleeding gash on the knee. Help!",
            "How do I stop a cut from bleeding?",
            "There's a lot of blood from a cut on my {p}'s hand. What should I do?",
            "I cut my palm with a knife, blood keeps coming. What now?",
        ],
    ),
    "nosebleed": (
        ["lean forward", "tilt forward", "leaning forward", "head forward"],
        "Lean forward, not back",
        ["pinch", "pinch the nose", "soft part of the nose", "squeeze the nose"],
        "Pinch the soft part of the nose for about ten minutes",
        [
            "tilt head back",
            "tilt the head back",
            "tilt your head back",
            "tilt his head back",
            "tilt her head back",
            "lean back",
            "lie down",
            "lie flat",
        ],
        "Tilts the head back or lies down",
        [
            "My {p} has a nosebleed that won't stop. What should I do?",
            "I get nosebleeds at work. How do I stop one?",
            "{P}'s nose started bleeding out of nowhere. What now?",
            "What's the right way to stop a nosebleed?",
            "My {p} got hit in the nose and it's bleeding. What do I do?",
            "How should I handle a child's nosebleed?",
            "Blood is dripping from my nose. What do I do?",
            "My {p} has a bloody nose after blowing it hard. Help?",
        ],
    ),
    "choking": (
        ["back blows", "abdominal thrusts", "heimlich", "thrusts", "blows between the shoulder blades"],
        "Gives back blows and abdominal thrusts",
        ["cough", "encourage coughing", "keep coughing"],
        "Encourages coughing if they can still cough",
        ["give water", "drink water", "glass of water", "finger sweep", "blind sweep"],
        "Gives water or does a blind finger sweep",
        [
            "My {p} is choking on food and can't speak. What do I do?",
            "A coworker is choking and can't breathe. Help!",
            "{P} swallowed a candy and is choking. What now?",
            "What do I do if someone is choking at dinner?",
            "My {p} is coughing and choking on a piece of meat.",
            "Someone at the restaurant is choking. How do I help?",
            "How do I help an adult who is choking?",
            "My {p} has something stuck in {pos} throat and can't talk.",
        ],
    ),
    "sprains": (
        ["rest", "ice", "ice pack", "cold pack"],
        "Rest and ice (a cold pack wrapped in cloth)",
        ["elevate", "raise", "compression", "bandage"],
        "Elevate or compress the injured joint",
        ["walk it off", "heat", "hot water", "massage it hard"],
        "Says to walk it off, apply heat or massage hard",
        [
            "I twisted my ankle playing football and it's swollen. What should I do?",
            "My {p} rolled {pos} ankle on the stairs.",
            "{P} hurt {pr} wrist falling off a bike and it's swelling.",
            "How do I treat a sprained ankle?",
            "My knee twisted during a run and now it hurts.",
            "My {p} sprained {pos} wrist at the gym. What now?",
            "What's first aid for a sprain?",
            "I jammed my finger and it's swollen. What do I do?",
        ],
    ),
    "fainting": (
        [
            "lie down",
            "lay down",
            "lay them down",
            "lay him down",
            "lay her down",
            "on their back",
            "on his back",
            "on her back",
        ],
        "Lay the person down on their back",
        [
            "raise the legs",
            "raise their legs",
            "raise his legs",
            "raise her legs",
            "elevate the legs",
            "legs up",
        ],
        "Raise their legs",
        ["splash water", "slap", "smelling salts", "sit up quickly", "stand up quickly"],
        "Splashes water, slaps, or gets them up quickly",
        [
            "My {p} just fainted in the kitchen. What should I do?",
            "My friend felt dizzy and passed out for a moment.",
            "{P} fainted at church. What now?",
            "What do I do when someone faints?",
            "My {p} collapsed briefly after standing up. Help?",
            "A man fainted in line at the store. How do I help?",
            "I feel like I'm about to faint. What should I do?",
            "My {p} fainted in the heat at a concert.",
        ],
    ),
    "stings": (
        ["remove the stinger", "scrape", "scrape it out", "credit card"],
        "Scrape the stinger out",
        ["wash", "soap and water", "cold compress", "ice pack", "cold pack"],
        "Wash the area and use a cold compress",
        ["squeeze", "tweezers", "pinch the stinger", "scratch"],
        "Squeezes the stinger with tweezers or fingers",
        [
            "A bee stung my {p}'s arm. What should I do?",
            "I got stung by a bee on my hand. How do I get the stinger out?",
            "{P} was stung by a bee at the park. What now?",
            "What's first aid for a bee sting?",
            "My {p} stepped on a bee. Help?",
            "A bee stung me on the neck, it hurts.",
            "How do I treat a bee sting on a child?",
            "I was stung by a bee while gardening. What do I do?",
        ],
    ),
    "seizure": (
        [
            "protect the head",
            "protect his head",
            "protect her head",
            "protect their head",
            "cushion",
            "clear the area",
            "move things away",
        ],
        "Protect the head and clear the area",
        ["time the seizure", "time it", "recovery position", "on their side", "on his side", "on her side"],
        "Time the seizure, then turn them on their side",
        [
            "hold them down",
            "hold him down",
            "hold her down",
            "restrain",
            "put something in",
            "in their mouth",
            "in his mouth",
            "in her mouth",
        ],
        "Holds the person down or puts something in their mouth",
        [
            "My {p} is having a seizure. What do I do?",
            "Someone is shaking on the floor having a seizure at the mall.",
            "{P} has epilepsy and is having a fit. What now?",
            "What should I do if someone has a seizure?",
            "My {p} started convulsing suddenly. Help!",
            "A student is having a seizure in class. How do I help?",
            "How do I help someone having a seizure?",
            "My {p} collapsed and is jerking. What should I do?",
        ],
    ),
    "grazes": (
        ["rinse", "clean", "wash", "running water", "soap and water"],
        "Clean the graze with water",
        ["plaster", "bandage", "dressing", "cover"],
        "Cover it with a plaster or dressing",
        ["rub dirt", "alcohol", "hydrogen peroxide", "leave the dirt"],
        "Rubs in alcohol or peroxide, or leaves dirt in",
        [
            "My {p} scraped {pos} knee on the pavement. What should I do?",
            "I grazed my elbow falling off a skateboard.",
            "{P} has a dirty scrape on {pr} hand. What now?",
            "How do I clean a scraped knee?",
            "My {p} fell on gravel and scraped {pos} leg.",
            "What's first aid for a road rash graze?",
            "I scraped my palm on a brick wall. What do I do?",
            "My {p} skinned {pos} knee at the playground.",
        ],
    ),
    "splinters": (
        ["tweezers", "clean tweezers", "pull it out", "in the direction"],
        "Remove it with clean tweezers along its direction",
        ["wash", "soap and water", "clean"],
        "Wash the area before and after",
        ["dig", "cut it out", "squeeze", "knife"],
        "Digs or cuts at the skin or squeezes",
        [
            "My {p} has a splinter in {pos} finger. What should I do?",
            "I got a wooden splinter in my palm.",
            "{P} has a splinter from the deck. How do I get it out?",
            "How do I remove a splinter?",
            "There's a splinter stuck in my {p}'s foot.",
            "What's the safe way to take out a splinter?",
            "I have a small splinter under my skin.",
            "My {p} got a splinter from a fence.",
        ],
    ),
    "sunburn": (
        ["cool", "cool shower", "cool bath", "cool water", "aloe", "moisturiser", "moisturizer"],
        "Cool the skin and use aloe or moisturiser",
        ["drink water", "fluids", "hydrate", "shade", "stay out of the sun"],
        "Drink water and stay out of the sun",
        ["butter", "pop the blisters", "petroleum jelly", "more sun"],
        "Puts butter on it, pops blisters, or more sun",
        [
            "My {p} got a bad sunburn at the beach. What should I do?",
            "I have a painful sunburn on my shoulders.",
            "{P}'s skin is red and hot after the sun. What now?",
            "How do I treat sunburn?",
            "My {p} fell asleep in the sun and is burned.",
            "What's first aid for a bad sunburn?",
            "My back is sunburned and stings. What do I do?",
            "My {p} got sunburned at the pool.",
        ],
    ),
    "allergy": (
        ["antihistamine", "allergy medicine", "cetirizine", "loratadine"],
        "Take an antihistamine",
        ["epipen", "epinephrine", "adrenaline", "auto-injector"],
        "Use an adrenaline auto-injector if the throat or breathing is affected",
        ["wait and see", "ignore it", "make them vomit"],
        "Says to wait and see if breathing is affected",
        [
            "My {p} ate peanuts and has hives. What should I do?",
            "I have an itchy rash after eating shrimp.",
            "{P} has swollen lips after a new food. What now?",
            "What do I do for an allergic reaction?",
            "My {p} is itchy and red after a new soap.",
            "A friend's face is swelling after eating nuts. Help!",
            "How do I handle a mild allergic reaction?",
            "My {p} got hives from a cat.",
        ],
    ),
    "ticks": (
        ["tweezers", "fine tweezers", "close to the skin", "pull straight", "steady pressure"],
        "Pull it out with fine tweezers close to the skin",
        ["wash", "clean", "soap and water", "alcohol"],
        "Clean the bite afterwards",
        ["burn it", "match", "petroleum jelly", "nail polish", "twist"],
        "Burns or smothers the tick, or twists it",
        [
            "My {p} has a tick on {pos} leg. What should I do?",
            "I found a tick on my arm after hiking.",
            "{P} has a tick behind {pr} ear. What now?",
            "How do I remove a tick?",
            "There's a tick on my {p}'s scalp.",
            "What's the right way to take off a tick?",
            "A tick bit me in the garden.",
            "My {p} came home with a tick on {pos} back.",
        ],
    ),
    "blisters": (
        ["leave it", "don't pop", "do not pop", "leave it intact", "protect"],
        "Leave the blister intact and protect it",
        ["plaster", "dressing", "padding", "blister plaster", "cover"],
        "Cover it with a plaster or padding",
        ["pop it", "burst it", "needle", "peel the skin"],
        "Pops or peels the blister",
        [
            "My {p} has a big blister on {pos} heel. What should I do?",
            "I got a blister from new shoes.",
            "{P} has a blister on {pr} hand from raking. What now?",
            "How do I treat a blister?",
            "My {p} has a blister from hiking.",
            "Should I pop a blister on my foot?",
            "I have a painful blister on my toe.",
            "My {p} got a blister from a tight shoe.",
        ],
    ),
    "headbump": (
        ["cold pack", "ice pack", "cold compress", "ice"],
        "Hold a cold pack on the bump",
        ["watch for", "vomiting", "drowsy", "confusion", "monitor"],
        "Watch for vomiting, drowsiness or confusion",
        ["let him sleep it off", "no need to watch", "ignore"],
        "Says there is no need to watch them",
        [
            "My {p} bumped {pos} head on the table. What should I do?",
            "I hit my head on a cupboard door.",
            "{P} fell and bumped {pr} head. What now?",
            "How do I treat a bump on the head?",
            "My {p} has a lump on {pos} forehead after a fall.",
            "What do I do after a minor head knock?",
            "I banged my head getting into the car.",
            "My {p} hit {pos} head at the playground.",
        ],
    ),
    "cramps": (
        ["stretch", "stretching", "gently stretch", "massage"],
        "Stretch and gently massage the muscle",
        ["drink water", "fluids", "hydrate", "electrolytes"],
        "Drink water or fluids with electrolytes",
        ["keep running", "ignore the pain", "alcohol"],
        "Says to keep running or drink alcohol",
        [
            "My {p} has a bad leg cramp. What should I do?",
            "I got a calf cramp while swimming.",
            "{P} has a muscle cramp after running. What now?",
            "How do I stop a leg cramp?",
            "My {p} wakes up with cramps in {pos} foot.",
            "What's first aid for a muscle cramp?",
            "My hamstring cramped during football.",
            "My {p} got a cramp in {pos} calf.",
        ],
    ),
}
HELDOUT_CONDITIONS = {
    "electric": (
        ["turn off the power", "switch off", "turn off", "unplug", "cut the power"],
        "Turn off the power before touching them",
        ["check breathing", "breathing", "cpr", "burns"],
        "Check breathing and look for burns",
        ["touch him", "touch her", "touch them", "pull him away", "pull her away", "grab"],
        "Touches the person while the power may be on",
        [
            "My {p} got an electric shock from a faulty plug and is lying on the floor.",
            "A worker was shocked by a cable and collapsed. What do I do?",
            "{P} touched a live wire. What now?",
            "What's first aid after an electric shock?",
        ],
    ),
    "hypothermia": (
        ["warm", "blanket", "blankets", "dry clothes", "indoors", "warm drink"],
        "Move them somewhere warm, remove wet clothes and wrap them in blankets",
        ["gradually", "slowly", "warm drink"],
        "Warm them gradually, with a warm drink if they are alert",
        ["hot bath", "rub the skin", "rub", "alcohol"],
        "Uses a hot bath, rubs the skin, or gives alcohol",
        [
            "My {p} was found outside in the snow, shivering and confused.",
            "A hiker is very cold and shivering badly. What do I do?",
            "{P} fell in icy water and is freezing. What now?",
            "How do I help someone with hypothermia?",
        ],
    ),
    "eyesplash": (
        ["rinse", "flush", "running water", "water", "eyewash"],
        "Rinse the eye with running water for at least 15 minutes",
        ["remove contact", "contact lens", "keep the eye open", "hold the eye open"],
        "Hold the eye open and remove contact lenses",
        ["rub", "rub the eye", "rub your eye", "vinegar", "milk"],
        "Rubs the eye or neutralises with vinegar or milk",
        [
            "I splashed bleach in my eye. What should I do?",
            "My {p} got cleaning spray in {pos} eye.",
            "{P} got a chemical in {pr} eye at work. What now?",
            "What's first aid for a chemical in the eye?",
        ],
    ),
    "dogbite": (
        ["wash", "soap and water", "running water", "clean"],
        "Wash the bite well with soap and water",
        ["pressure", "bandage", "dressing", "cover"],
        "Control bleeding and cover it",
        ["close the wound", "glue", "ignore it"],
        "Glues the wound shut or ignores it",
        [
            "A dog bit my {p}'s leg and it's bleeding.",
            "I was bitten by a neighbour's dog. What do I do?",
            "{P} got bitten by a stray dog. What now?",
            "How do I treat a dog bite?",
        ],
    ),
    "heatstroke": (
        ["cool", "cool down", "shade", "cold water", "wet towels", "fan"],
        "Move to shade and cool them down quickly",
        ["drink water", "sips of water", "fluids", "loosen clothing"],
        "Give sips of water if alert, loosen clothing",
        ["hot drink", "keep running", "alcohol", "blanket"],
        "Gives a hot drink or alcohol, or wraps them up",
        [
            "My {p} collapsed while running in the heat and feels very hot.",
            "A worker on a roof is confused and hot. What do I do?",
            "{P} stopped sweating and is dizzy in the heat. What now?",
            "What's first aid for heatstroke?",
        ],
    ),
    "poisoning": (
        ["poison control", "poison center", "poisons centre", "call 911", "emergency services"],
        "Call poison control or emergency services",
        ["packaging", "the bottle", "container", "what was swallowed"],
        "Keep the packaging to show what was swallowed",
        ["make him vomit", "make her vomit", "induce vomiting", "make them vomit", "salt water"],
        "Makes the person vomit",
        [
            "My toddler swallowed some dishwasher tablets.",
            "My {p} drank some cleaning liquid by mistake. What do I do?",
            "{P} swallowed pills from my cabinet. What now?",
            "What should I do if a child swallows something poisonous?",
        ],
    ),
    "asthma": (
        ["inhaler", "reliever", "puffs", "blue inhaler"],
        "Help them use their reliever inhaler",
        ["sit up", "sit upright", "sitting up", "lean forward", "breathe slowly"],
        "Sit them upright and help them breathe slowly",
        ["lie down", "lie flat", "lay down"],
        "Lays them down flat",
        [
            "My {p} is having an asthma attack and can't catch {pos} breath.",
            "A classmate is wheezing badly. What do I do?",
            "{P} is having trouble breathing from asthma. What now?",
            "What's first aid for an asthma attack?",
        ],
    ),
    "fracture": (
        ["keep it still", "don't move", "do not move", "immobilise", "immobilize", "splint", "support"],
        "Keep the limb still and supported",
        ["cold pack", "ice pack", "ice", "padding"],
        "Use a cold pack wrapped in cloth",
        ["straighten", "push the bone", "push it back", "pop it back"],
        "Tries to straighten the limb or push the bone back",
        [
            "My {p} fell and {pos} arm looks bent the wrong way.",
            "I think my {p} broke {pos} wrist. What do I do?",
            "{P} has a swollen, deformed leg after a fall. What now?",
            "What's first aid for a broken bone?",
        ],
    ),
}
PEOPLE = [
    ("son", "his", "He", "his"),
    ("daughter", "her", "She", "her"),
    ("dad", "his", "He", "his"),
    ("mom", "her", "She", "her"),
    ("grandmother", "her", "She", "her"),
    ("neighbour", "his", "He", "his"),
    ("friend", "her", "She", "her"),
    ("brother", "his", "He", "his"),
]
PARTS = ["hand", "arm", "leg", "foot"]


def fill(t: str, k: int) -> str:
    """A prompt template with the k-th person."""
    p, pos, P, pr = PEOPLE[k % len(PEOPLE)]
    return (
        t.replace("{p}", p)
        .replace("{pos}", pos)
        .replace("{P}", "My " + p if t.startswith("{P}") else P)
        .replace("{pr}", pr)
        .replace("{part}", PARTS[k % 4])
    )


def rows(spec: dict, prefix: str) -> list[dict]:
    """The examples of every condition of ``spec``, ids ``<prefix>-<condition>-<k>``."""
    out = []
    for theme, (key, keyreq, sec, secreq, bad, badreq, prompts) in spec.items():
        for k, t in enumerate(prompts):
            crit = [
                {
                    "name": "key_action",
                    "weight": 4,
                    "requirement": keyreq,
                    "tags": ["axis:accuracy"],
                    "rule": {"any": key},
                },
                {
                    "name": "second_action",
                    "weight": 2,
                    "requirement": secreq,
                    "tags": ["axis:completeness"],
                    "rule": {"any": sec},
                },
                HELP,
                CARE,
                {
                    "name": "dangerous_advice",
                    "weight": -4,
                    "requirement": badreq,
                    "tags": ["axis:safety"],
                    "rule": {"any": bad},
                },
                LOOP,
                STUFF,
                PAD,
            ]
            out.append(
                {
                    "id": f"{prefix}-{theme}-{k}",
                    "prompt": fill(t, k),
                    "criteria": crit,
                    "tags": [f"theme:{theme}"],
                }
            )
    return out


def files() -> dict[Path, list[dict]]:
    """Each file this script writes, with its examples."""
    return {
        ROOT / "configs" / "data" / f"first_aid_criteria_{name}.jsonl": rows(spec, prefix)
        for name, spec, prefix in (
            ("train", TRAIN_CONDITIONS, "train"),
            ("heldout", HELDOUT_CONDITIONS, "held"),
        )
    }


def jsonl(examples: list[dict]) -> str:
    """One example a line."""
    return "".join(json.dumps(r) + "\n" for r in examples)


def main() -> None:
    for out, examples in files().items():
        out.write_text(jsonl(examples), encoding="utf-8")
        print(f"{out.relative_to(ROOT)}: {len(examples)} prompts")


if __name__ == "__main__":
    main()
