"""Prompts of the three graders, with the public ``rubric`` library's structure: the per-criterion user
prompt carries ``<criterion_type>positive|negative</criterion_type>``, ``<criterion>``, ``<query>`` when
given, ``<reference_answer>`` when given, and ``<response>`` (with nested ``<thinking>`` and ``<output>`` for
a dict with both). Without a reference answer the prompts are exactly the library's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rubrics.criteria.criterion import Criterion, ToGrade

_SIGN_RULES = (
    "A positive criterion describes something the response should do: it is MET when the response does it.\n"
    "A negative criterion describes an error the response should avoid: it is MET when the response MAKES "
    "that error, and UNMET when it avoids it.\n"
    "Judge only what the response actually says; do not give credit for intentions or vague mentions."
)

PER_CRITERION_SYSTEM_PROMPT = (
    "You are an expert grader. You check one response against one criterion.\n"
    f"{_SIGN_RULES}\n"
    'Answer with only a JSON object: {"explanation": "<why>", "criterion_status": "MET" or "UNMET"}.'
)
"""Default system prompt of ``PerCriterionGrader``."""

ONE_SHOT_SYSTEM_PROMPT = (
    "You are an expert grader. You check one response against every criterion of a rubric.\n"
    f"{_SIGN_RULES}\n"
    'Answer with only a JSON object: {"criteria_evaluations": [{"criterion_idx": <0-based index>, '
    '"explanation": "<why>", "criterion_status": "MET" or "UNMET"}, ...]}, one entry per criterion.'
)
"""Default system prompt of ``PerCriterionOneShotGrader``."""

RUBRIC_AS_JUDGE_SYSTEM_PROMPT = (
    "You are an expert grader. You read a rubric of weighted criteria and give the response one overall "
    "score from 0 to 100. Positive weights are desired traits; negative weights are errors that lower "
    "the score when the response makes them.\n"
    'Answer with only a JSON object: {"explanation": "<why>", "overall_score": <0-100>}.'
)
"""Default system prompt of ``RubricAsJudgeGrader``."""


def criterion_type(criterion: Criterion) -> str:
    """``negative`` for a negative weight, else ``positive``."""
    return "negative" if criterion.weight < 0 else "positive"


def response_block(to_grade: ToGrade) -> str:
    """``<response>...</response>``; a dict with ``thinking`` and ``output`` nests both tags."""
    if isinstance(to_grade, str):
        return f"<response>\n{to_grade}\n</response>"
    if isinstance(to_grade, Mapping):
        unknown = set(to_grade) - {"thinking", "output"}
        if unknown or "output" not in to_grade:
            raise ValueError(
                "to_grade as a dict needs an 'output' key and optionally 'thinking'; "
                f"got keys {sorted(to_grade)}"
            )
        thinking = to_grade.get("thinking")
        inner = f"<thinking>\n{thinking}\n</thinking>\n" if thinking else ""
        return f"<response>\n{inner}<output>\n{to_grade['output']}\n</output>\n</response>"
    raise TypeError(
        f"to_grade must be a string or a dict with 'thinking'/'output', got {type(to_grade).__name__}"
    )


def _query_block(query: str | None) -> str:
    return f"<query>\n{query}\n</query>\n\n" if query else ""


REFERENCE_NOTE = (
    "The reference answer below is one good response to the query, for comparison only: judge the response "
    "by the criteria, not by how closely it resembles the reference."
)
"""Precedes the ``<reference_answer>`` block, so the judge neither copies its verdict from it nor rewards
resemblance to it."""


def _reference_block(reference: str | None) -> str:
    return f"{REFERENCE_NOTE}\n<reference_answer>\n{reference}\n</reference_answer>\n\n" if reference else ""


def _context(query: str | None, reference: str | None) -> str:
    """What precedes ``<response>``: the query and the reference answer, each only when given."""
    return _query_block(query) + _reference_block(reference)


def per_criterion_prompt(
    criterion: Criterion, to_grade: ToGrade, query: str | None = None, reference: str | None = None
) -> str:
    """User prompt for one criterion."""
    return (
        f"<criterion_type>{criterion_type(criterion)}</criterion_type>\n\n"
        f"<criterion>\n{criterion.requirement}\n</criterion>\n\n"
        f"{_context(query, reference)}{response_block(to_grade)}"
    )


def one_shot_prompt(
    criteria: Sequence[Criterion], to_grade: ToGrade, query: str | None = None, reference: str | None = None
) -> str:
    """User prompt listing every criterion with its 0-based index."""
    items = "\n".join(
        f"<criterion_{i}>\n<criterion_idx>{i}</criterion_idx>\n"
        f"<criterion_type>{criterion_type(c)}</criterion_type>\n"
        f"<criterion>\n{c.requirement}\n</criterion>\n</criterion_{i}>"
        for i, c in enumerate(criteria)
    )
    return f"<criteria>\n{items}\n</criteria>\n\n{_context(query, reference)}{response_block(to_grade)}"


def rubric_as_judge_prompt(
    criteria: Sequence[Criterion], to_grade: ToGrade, query: str | None = None, reference: str | None = None
) -> str:
    """User prompt with the weighted rubric, for one 0-100 score."""
    items = "\n".join(
        f'<criterion weight="{c.weight:g}" type="{criterion_type(c)}">{c.requirement}</criterion>'
        for c in criteria
    )
    return f"<rubric>\n{items}\n</rubric>\n\n{_context(query, reference)}{response_block(to_grade)}"
