"""What the generator model is asked, and the strict JSON schemas of its answers.

Two requests per item: a **hidden description** (what really happened, consistent with the planned route)
and the **scenario** built from it (the opening prompt with partial information, the ground truth with
reasoning for every requirement on the route, ``revealed_info`` for the requirements that unlock more, an
ideal reply per requirement and one wrong reply at the branching point, both used by re-grading). A third,
the **repair** request, sends back the validator's message once. Schemas bound every free string
(``maxLength``): a small model under structured output otherwise fills its token budget.
"""

from __future__ import annotations

from typing import Any

from envs.synth.plan import PlannedItem, answer_label, domain
from rubrics.multistep.requirements import (
    ContinuousRequirement,
    DiscreteRequirement,
    Requirement,
    UnitVectorRequirement,
)
from rubrics.multistep.rubric import MultiStepRubric

SYSTEM_PROMPT = (
    "You write realistic training scenarios for a step-by-step evaluation rubric. Every scenario must make "
    "exactly the listed findings true. Answer with one JSON object and nothing else."
)
MAX_PROMPT_CHARS = 1500
MAX_TEXT_CHARS = 600
MAX_REPLY_CHARS = 400

HIDDEN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["description", "hidden_description"],
    "properties": {
        "description": {"type": "string", "minLength": 1, "maxLength": 200},
        "hidden_description": {"type": "string", "minLength": 1, "maxLength": 1200},
    },
}
"""The hidden-description reply."""


def answer_meaning(req: Requirement, answer: Any) -> str:
    """``1 (yes)``, ``2 (emergent transport ...)``: an answer as the generator reads it."""
    if isinstance(req, DiscreteRequirement):
        return f"{answer_label(answer)} ({req.options.get(float(answer), '')})"
    if isinstance(req, UnitVectorRequirement):
        return f"{req.labels[int(answer_label(answer)[1:])]!r}"
    if isinstance(req, ContinuousRequirement):
        return f"{float(answer)} (on a scale from {req.low} to {req.high})"
    return f"{answer_label(answer)} ({'yes' if float(answer) == 1.0 else 'no'})"


def findings(rubric: MultiStepRubric, item: PlannedItem) -> str:
    """The planned route as a numbered list: each requirement's question and the answer it must have."""
    reqs = rubric.graph.requirements
    return "\n".join(
        f"{i}. {name}: {reqs[name].question.strip()}\n   Required answer: {answer_meaning(reqs[name], a)}"
        for i, (name, a) in enumerate(item.answers.items(), start=1)
    )


def _header(rubric: MultiStepRubric) -> str:
    about = f"Rubric {rubric.name!r}" if rubric.name else "The rubric"
    return f"{about}: {rubric.description.strip()}" if rubric.description else about


def hidden_messages(rubric: MultiStepRubric, item: PlannedItem) -> list[dict[str, Any]]:
    """The hidden-description request of ``item``."""
    user = (
        f"{_header(rubric)}\n\n"
        f"Write the hidden description of scenario number {item.index + 1}: the full truth of what happened, "
        "which the person being evaluated never sees directly. Make it specific (people, place, timing, "
        "findings) and different from other scenarios. It must make every finding below true, in this "
        f"order of assessment:\n\n{findings(rubric, item)}\n\n"
        'Return JSON: {"description": "<one line summary>", "hidden_description": "<3 to 6 sentences>"}'
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def reveal_candidates(rubric: MultiStepRubric, item: PlannedItem) -> list[str]:
    """Requirements on the route whose planned answer unlocks something (where ``revealed_info`` fits)."""
    reqs = rubric.graph.requirements
    return [name for name, a in item.answers.items() if reqs[name].route(a)]


def scenario_messages(rubric: MultiStepRubric, item: PlannedItem, hidden: str) -> list[dict[str, Any]]:
    """The scenario request of ``item``, built on its hidden description."""
    reqs = rubric.graph.requirements
    reveal = ", ".join(reveal_candidates(rubric, item)) or "(none)"
    wrong = ""
    if item.wrong:
        w = item.wrong["requirement"]
        wrong = (
            f'- "wrong_reply": one or two sentences for step {w} that wrongly conclude '
            f"{answer_meaning(reqs[w], item.wrong['answer'])}.\n"
        )
    user = (
        f"{_header(rubric)}\n\nHidden description (the truth):\n{hidden}\n\n"
        f"Planned findings, in order:\n\n{findings(rubric, item)}\n\n"
        "Write the scenario as one JSON object with these fields:\n"
        '- "prompt": what the person is told at the start: the situation and first impressions only, '
        "never the later findings outright.\n"
        '- "answers": for every numbered step above, {"answer": <the required answer as a number>, '
        '"reasoning": <why, from the hidden description>}.\n'
        f'- "revealed_info": for steps among [{reveal}], the text shown once the person handles that step '
        "correctly: what they find next.\n"
        '- "ideal_replies": for every step, one or two sentences an expert says at that step, stating the '
        "correct finding and action.\n"
        f"{wrong}"
        "Use the step names exactly as given."
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def repair_messages(previous: list[dict[str, Any]], reply: str, problem: str) -> list[dict[str, Any]]:
    """The one repair request: the scenario conversation, its reply, and what the validator said."""
    return [
        *previous,
        {"role": "assistant", "content": reply},
        {
            "role": "user",
            "content": (
                f"That scenario failed validation: {problem}\n"
                "Reply with the corrected JSON object only, with the same fields."
            ),
        },
    ]


def answer_schema(req: Requirement) -> dict[str, Any]:
    """JSON schema of one ground-truth answer of ``req``."""
    if isinstance(req, ContinuousRequirement):
        return {"type": "number", "minimum": req.low, "maximum": req.high}
    if isinstance(req, UnitVectorRequirement):
        size = len(req.labels)
        item = {"type": "number", "minimum": 0, "maximum": 1}
        return {"type": "array", "items": item, "minItems": size, "maxItems": size}
    return {"enum": [int(v) if float(v).is_integer() else v for v in domain(req)]}  # type: ignore[arg-type]


def scenario_schema(rubric: MultiStepRubric, item: PlannedItem) -> dict[str, Any]:
    """The strict schema of ``item``'s scenario reply: names of the route only, answers in each domain."""
    reqs = rubric.graph.requirements
    path = item.path
    text = {"type": "string", "minLength": 1, "maxLength": MAX_REPLY_CHARS}

    def entry(name: str) -> dict[str, Any]:
        return {
            "type": "object",
            "additionalProperties": False,
            "required": ["answer", "reasoning"],
            "properties": {
                "answer": answer_schema(reqs[name]),
                "reasoning": {"type": "string", "maxLength": 300},
            },
        }

    properties: dict[str, Any] = {
        "prompt": {"type": "string", "minLength": 1, "maxLength": MAX_PROMPT_CHARS},
        "answers": _object({n: entry(n) for n in path}, path),
        "revealed_info": _object(
            {n: {"type": "string", "maxLength": MAX_TEXT_CHARS} for n in reveal_candidates(rubric, item)}, []
        ),
        "ideal_replies": _object(dict.fromkeys(path, text), path),
    }
    if item.wrong:
        properties["wrong_reply"] = text
    return {
        "type": "object",
        "additionalProperties": False,
        "required": list(properties),
        "properties": properties,
    }


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "required": required, "properties": properties}
