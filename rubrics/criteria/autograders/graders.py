"""The three weighted-criteria autograders. Each takes ``generate_fn(system_prompt, user_prompt)``, sync or
async, returning its output schema (or a dict, or JSON text), plus ``normalize=True`` and an optional
``system_prompt``. ``Grader.from_client(client)`` builds one on the LLM judge client with no user code.
``grade(criteria, to_grade, query=None, reference=None)``: a reference answer, when given, is shown to the
judge in a ``<reference_answer>`` block.

The prompts depend only on their inputs, so grading the same response against the same criterion (and
query and reference) again is the same request, served by the client's verdict cache.

An output that does not fit (a missing criterion, an index out of range, a bad status) raises
``GraderOutputError``; nothing is silently scored 0.
"""

from __future__ import annotations

import asyncio
import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel

from rubrics.criteria.autograders import prompts
from rubrics.criteria.autograders.schemas import (
    GraderOutputError,
    OneShotOutput,
    PerCriterionOutput,
    RubricAsJudgeOutput,
    coerce_output,
)
from rubrics.criteria.autograders.scoring import holistic_score, per_criterion_score
from rubrics.criteria.criterion import Criterion, CriterionReport, EvaluationReport, ToGrade
from rubrics.judges.client import LLMJudgeClient, StructuredReply

GenerateFn = Callable[[str, str], Any]
"""``generate_fn(system_prompt, user_prompt)`` -> the grader's schema, a dict or JSON text (or an
awaitable)."""

G = TypeVar("G", bound="Autograder")
M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


def judge_generate_fn(client: LLMJudgeClient, output_type: type[M]) -> Callable[[str, str], Any]:
    """A generate function on the LLM judge client: structured output, retries on malformed replies (asked
    the way every LLM judge asks, ``LLMJudgeClient.ask``)."""
    reply = StructuredReply(
        lambda text: coerce_output(output_type, text), output_type.model_json_schema(), output_type.__name__
    )

    async def generate(system_prompt: str, user_prompt: str) -> M:
        return await client.ask(system_prompt, user_prompt, reply)

    return generate


async def gather_or_cancel(calls: Sequence[Awaitable[T]]) -> list[T]:
    """``asyncio.gather``, except that the first failure cancels the calls still running: one criterion
    without a verdict fails the whole grading, so the others' verdicts would be thrown away, and their
    retries would hold judge slots that other rollouts are waiting for."""
    tasks = [asyncio.ensure_future(c) for c in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        raise


class Autograder(ABC):
    """Base of the graders: calls ``generate_fn`` and turns its output into an ``EvaluationReport``."""

    output_type: ClassVar[type[BaseModel]]
    """What ``generate_fn`` must return."""
    default_system_prompt: ClassVar[str]
    """Used when no ``system_prompt`` is given."""
    gives_verdicts: ClassVar[bool] = True
    """True when the report has a verdict per criterion."""

    def __init__(self, generate_fn: GenerateFn, normalize: bool = True, system_prompt: str | None = None):
        if not callable(generate_fn):
            raise TypeError(f"generate_fn must be callable, got {generate_fn!r}")
        self.generate_fn = generate_fn
        """The model call."""
        self.normalize = normalize
        """Score in [0, 1] (True) or the raw weighted sum (False)."""
        self.system_prompt = system_prompt or self.default_system_prompt
        """The system prompt sent with every call."""

    @classmethod
    def from_client(cls: type[G], client: LLMJudgeClient, **kwargs: Any) -> G:
        """This grader on an LLM judge client (a vLLM server or a hosted API)."""
        return cls(judge_generate_fn(client, cls.output_type), **kwargs)

    async def generate(self, user_prompt: str, output_type: type[M]) -> M:
        """Call ``generate_fn`` (sync or async) and check its output."""
        result = self.generate_fn(self.system_prompt, user_prompt)
        if inspect.isawaitable(result):
            result = await result
        return coerce_output(output_type, result)

    @abstractmethod
    async def grade(
        self,
        criteria: Sequence[Criterion],
        to_grade: ToGrade,
        query: str | None = None,
        reference: str | None = None,
    ) -> EvaluationReport:
        """Grade one response against ``criteria``; ``reference`` is a reference answer shown to the judge."""

    def _report(self, criteria: Sequence[Criterion], met: list[bool], reasons: list[str]) -> EvaluationReport:
        score, raw = per_criterion_score([c.weight for c in criteria], met, self.normalize)
        report = [
            CriterionReport(**c.model_dump(), verdict="MET" if m else "UNMET", reason=r)
            for c, m, r in zip(criteria, met, reasons, strict=True)
        ]
        return EvaluationReport(score=score, raw_score=raw, llm_raw_score=raw, report=report)


class PerCriterionGrader(Autograder):
    """One call per criterion, all concurrent; each returns MET or UNMET."""

    output_type = PerCriterionOutput
    default_system_prompt = prompts.PER_CRITERION_SYSTEM_PROMPT

    async def grade(
        self,
        criteria: Sequence[Criterion],
        to_grade: ToGrade,
        query: str | None = None,
        reference: str | None = None,
    ) -> EvaluationReport:
        """Grade each criterion in its own call."""
        user_prompts = [prompts.per_criterion_prompt(c, to_grade, query, reference) for c in criteria]
        outputs = await gather_or_cancel([self.generate(p, PerCriterionOutput) for p in user_prompts])
        met = [o.criterion_status == "MET" for o in outputs]
        return self._report(criteria, met, [o.explanation for o in outputs])


class PerCriterionOneShotGrader(Autograder):
    """One call for every criterion; the answer names each criterion by its 0-based index."""

    output_type = OneShotOutput
    default_system_prompt = prompts.ONE_SHOT_SYSTEM_PROMPT

    async def grade(
        self,
        criteria: Sequence[Criterion],
        to_grade: ToGrade,
        query: str | None = None,
        reference: str | None = None,
    ) -> EvaluationReport:
        """Grade every criterion in one call."""
        output = await self.generate(
            prompts.one_shot_prompt(criteria, to_grade, query, reference), OneShotOutput
        )
        by_idx = {}
        for evaluation in output.criteria_evaluations:
            i = evaluation.criterion_idx
            if i >= len(criteria):
                raise GraderOutputError(f"criterion_idx {i} is out of range for {len(criteria)} criteria")
            if i in by_idx:
                raise GraderOutputError(f"criterion_idx {i} is evaluated twice")
            by_idx[i] = evaluation
        missing = [i for i in range(len(criteria)) if i not in by_idx]
        if missing:
            raise GraderOutputError(f"no evaluation for criterion_idx {missing}")
        ordered = [by_idx[i] for i in range(len(criteria))]
        met = [e.criterion_status == "MET" for e in ordered]
        return self._report(criteria, met, [e.explanation for e in ordered])


class RubricAsJudgeGrader(Autograder):
    """One call; the model scores the whole rubric from 0 to 100."""

    output_type = RubricAsJudgeOutput
    default_system_prompt = prompts.RUBRIC_AS_JUDGE_SYSTEM_PROMPT
    gives_verdicts = False

    async def grade(
        self,
        criteria: Sequence[Criterion],
        to_grade: ToGrade,
        query: str | None = None,
        reference: str | None = None,
    ) -> EvaluationReport:
        """Grade holistically; ``report`` is None."""
        output = await self.generate(
            prompts.rubric_as_judge_prompt(criteria, to_grade, query, reference), RubricAsJudgeOutput
        )
        llm = output.overall_score
        score, raw = holistic_score([c.weight for c in criteria], llm, self.normalize)
        return EvaluationReport(score=score, raw_score=raw, llm_raw_score=llm, report=None)
