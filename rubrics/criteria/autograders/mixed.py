"""``RuleFirstGrader``: criteria that carry a ``rule`` are judged offline by it, the rest by an LLM
autograder, both in one report and one score.

Scores, with ``R`` the rule-judged criteria and ``L`` the LLM-judged ones (formulas of
``rubrics.criteria.autograders.scoring``, over all criteria together):

    per-criterion or one-shot inner grader:  per_criterion_score(all weights, all verdicts)
    holistic inner grader (0-100 over L):    raw = llm / 100 * sum(max(0, w) for L) + sum(w for MET in R)
                                             score = clamp(raw / sum(max(0, w) for all))   normalize=True

So a rubric whose criteria all carry rules needs no LLM at all, and a mixed one asks the LLM only about
the criteria no rule can decide. The reference answer goes to the LLM only (a rule reads the response).

``max_gradings`` bounds the gradings that hand criteria to the LLM at once. A grading builds every prompt
and cache key of its criteria before its first request is sent, and gradings started together all do so
before any answer is read: 5,000 rollouts graded at once (a held-out evaluation) left a 50 ms judge idle
for the first 3.9 s of a 37.5 s ideal, 1.4 s of building and 2.4 s of full garbage collections over what was
built (``benchmarks/criteria_full_size.py``). A bound of a few gradings per judge slot keeps the judge's
queue full while the next gradings are built.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Sequence

from rubrics.criteria.autograders.scoring import clamp, per_criterion_score
from rubrics.criteria.criterion import Criterion, CriterionReport, EvaluationReport, ToGrade
from rubrics.criteria.rubric import Grader


def response_output(to_grade: ToGrade) -> str:
    """The text a rule reads: the response, or its ``output`` part (a rule never reads the thinking)."""
    return to_grade if isinstance(to_grade, str) else str(to_grade.get("output", ""))


class RuleFirstGrader:
    """Rules where a criterion has one, ``inner`` (an LLM autograder) for the others."""

    def __init__(
        self, inner: Grader | None = None, normalize: bool = True, max_gradings: int | None = None
    ) -> None:
        if max_gradings is not None and max_gradings < 1:
            raise ValueError(f"max_gradings must be None or at least 1, got {max_gradings}")
        self.inner = inner
        """The autograder of the criteria without a rule; None when every criterion must carry one."""
        self.normalize = normalize
        """Score in [0, 1] (True) or the raw weighted sum (False); the inner grader's own setting is
        not used, so both kinds of criteria are scored alike."""
        self.max_gradings = max_gradings
        """Gradings that ask ``inner`` at once; the others wait their turn (None: no bound)."""
        self._slots = asyncio.Semaphore(max_gradings) if max_gradings is not None else None

    @property
    def gives_verdicts(self) -> bool:
        """True unless a holistic inner grader leaves the LLM-judged criteria without verdicts."""
        return self.inner is None or self.inner.gives_verdicts

    async def grade(
        self,
        criteria: Sequence[Criterion],
        to_grade: ToGrade,
        query: str | None = None,
        reference: str | None = None,
    ) -> EvaluationReport:
        """Grade ``to_grade`` against ``criteria``; ``reference`` (a reference answer) goes to the LLM
        only."""
        text = response_output(to_grade)
        by_rule = {i: c.rule_verdict(text) for i, c in enumerate(criteria) if c.rule is not None}
        llm_idx = [i for i in range(len(criteria)) if i not in by_rule]
        if llm_idx and self.inner is None:
            first = criteria[llm_idx[0]]
            raise ValueError(
                f"{len(llm_idx)} criteria have no rule and there is no LLM judge to grade them (the first: "
                f"{first.name or first.requirement[:60]!r})"
            )
        inner_report = None
        if llm_idx:
            assert self.inner is not None
            subset = [criteria[i] for i in llm_idx]
            async with self._slots or contextlib.nullcontext():
                inner_report = await self.inner.grade(subset, to_grade, query=query, reference=reference)
        weights = [c.weight for c in criteria]
        if inner_report is not None and inner_report.report is None:  # holistic over the LLM criteria
            llm_positive = math.fsum(max(0.0, criteria[i].weight) for i in llm_idx)
            raw = inner_report.llm_raw_score / 100.0 * llm_positive
            raw += math.fsum(criteria[i].weight for i, met in by_rule.items() if met)
            positive = math.fsum(max(0.0, w) for w in weights)
            score = (clamp(raw / positive) if positive > 0 else 0.0) if self.normalize else raw
            rules = [_report(criteria[i], met) for i, met in sorted(by_rule.items())]
            return EvaluationReport(
                score=score, raw_score=raw, llm_raw_score=inner_report.llm_raw_score, report=rules or None
            )
        reports: list[CriterionReport | None] = [None] * len(criteria)
        for i, rule_met in by_rule.items():
            reports[i] = _report(criteria[i], rule_met)
        for i, judged in zip(llm_idx, (inner_report.report or []) if inner_report else [], strict=True):
            reports[i] = judged.model_copy(update={"judged_by": "llm"})
        full = [r for r in reports if r is not None]
        met = [r.verdict == "MET" for r in full]
        score, raw = per_criterion_score(weights, met, self.normalize)
        return EvaluationReport(score=score, raw_score=raw, llm_raw_score=raw, report=full)


def _report(criterion: Criterion, met: bool) -> CriterionReport:
    reason = "the response matches the rule" if met else "the response does not match the rule"
    return CriterionReport(
        **criterion.model_dump(), verdict="MET" if met else "UNMET", reason=reason, judged_by="rule"
    )
