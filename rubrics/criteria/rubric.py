"""``CriteriaRubric``: a list of weighted criteria (``rubrics.criteria.criterion``) with its loaders.

It loads from a flat list of criteria, a list of sections each holding ``criteria``, or a dict with a
``sections`` or ``rubric`` key, in YAML or JSON. A bad item is rejected with its path
(``sections[1].criteria[0]``), the field and the reason, and the file name when it came from one.
``await rubric.grade(to_grade, autograder, query)`` returns an ``EvaluationReport``;
``rubric.as_rubric(autograder)`` turns it into a training ``Rubric`` (score = reward, each criterion's verdict
a metric).
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Literal, Protocol

from pydantic import ValidationError

from rubrics.criteria.criterion import (
    ALL_ZERO,
    Criterion,
    EvaluationReport,
    ToGrade,
    WeightTotalError,
    check_weight_totals,
)
from rubrics.error_text import show
from rubrics.judges.base import render_messages, response_text
from rubrics.loading import (
    Document,
    FileLoadError,
    parse_json,
    parse_yaml_document,
    read_text,
    schema_error,
)
from rubrics.rubric import Rubric
from rubrics.types import Messages


class CriteriaLoadError(FileLoadError):
    """A rubric file or object is malformed; carries the file, line and field (``rubrics.loading`` style)."""


Where = tuple[Any, ...]
"""A place in the criteria document (``("sections", 1, "criteria", 0)``)."""


def _items(doc: Document, data: Any, where: Where) -> list[tuple[Where, Any]]:
    """Every criterion item with its place, from any accepted shape."""
    if isinstance(data, Mapping):
        for key in ("sections", "rubric", "criteria"):
            if key in data:
                return _items(doc, data[key], (*where, key))
        expected = "a list of criteria or a mapping with a 'sections', 'rubric' or 'criteria' key"
        raise _error(doc, where, f"wrong shape (expected {expected}, got {show(data)})")
    if isinstance(data, str | bytes) or not isinstance(data, Sequence):
        raise _error(doc, where, f"wrong type (expected a list of criteria, got {show(data)})")
    out: list[tuple[Where, Any]] = []
    for i, item in enumerate(data):
        if isinstance(item, Mapping) and "criteria" in item:
            out.extend(_items(doc, item["criteria"], (*where, i, "criteria")))
        else:
            out.append(((*where, i), item))
    return out


def _criterion(doc: Document, where: Where, item: Any) -> Criterion:
    if isinstance(item, Criterion):
        return item
    if not isinstance(item, Mapping):
        raise _error(
            doc, where, f"wrong type (expected a mapping with weight and requirement, got {show(item)})"
        )
    try:
        return Criterion.model_validate(dict(item))
    except ValidationError as exc:
        raise schema_error(exc, doc, where, Criterion, CriteriaLoadError) from None


def _check_totals(doc: Document, placed: Sequence[tuple[Where, Criterion]]) -> None:
    """Refuse criteria whose positive or negative weights add up past the largest float, at the weight
    that takes the total there."""
    try:
        check_weight_totals([c.weight for _, c in placed])
    except WeightTotalError as exc:
        raise _error(doc, (*placed[exc.index][0], "weight"), str(exc)) from None


def _error(doc: Document, where: Where, reason: str) -> CriteriaLoadError:
    return doc.error(where, reason, CriteriaLoadError)


def _load_text(text: str, source: str, kind: Literal["yaml", "json"]) -> Document:
    try:
        if kind == "json":
            return Document(parse_json(text, source), source)
        return parse_yaml_document(text, source)
    except FileLoadError as exc:
        raise CriteriaLoadError(exc.file, exc.reason, exc.line, exc.field) from None


class Grader(Protocol):
    """What grades a response against criteria: ``rubrics.criteria.autograders.Autograder`` and its subclasses
    (typed by shape here, so that this module does not import the graders that import it)."""

    @property
    def gives_verdicts(self) -> bool:
        """True when the report has a verdict per criterion."""
        ...

    async def grade(
        self,
        criteria: Sequence[Criterion],
        to_grade: ToGrade,
        query: str | None = None,
        reference: str | None = None,
    ) -> EvaluationReport:
        """Grade one response against ``criteria`` (``reference``: a reference answer the judge may see)."""
        ...


class CriteriaRubric:
    """A list of weighted criteria, graded by an autograder."""

    def __init__(self, criteria: Sequence[Criterion | Mapping[str, Any]], autograder: Grader | None = None):
        doc = Document(criteria, "<criteria>")
        self.criteria: list[Criterion] = [_criterion(doc, (i,), c) for i, c in enumerate(criteria)]
        """The criteria, in order (their indices are the one-shot grader's ``criterion_idx``)."""
        if not self.criteria:
            raise CriteriaLoadError(doc.file, "no criteria (expected at least one criterion)")
        if not any(c.weight for c in self.criteria):
            raise CriteriaLoadError(doc.file, ALL_ZERO)
        _check_totals(doc, [((i,), c) for i, c in enumerate(self.criteria)])
        self.autograder = autograder
        """Used by ``grade`` when none is passed."""

    def __len__(self) -> int:
        return len(self.criteria)

    @classmethod
    def from_dict(cls, data: Any, source: str | None = None) -> CriteriaRubric:
        """Build from plain data of any accepted shape; ``source`` (a file name) starts error messages."""
        return cls._from_document(Document(data, source or "<criteria>"))

    @classmethod
    def _from_document(cls, doc: Document) -> CriteriaRubric:
        items = _items(doc, doc.data, ())
        if not items:
            raise _error(doc, (), "no criteria (expected at least one criterion)")
        criteria = [_criterion(doc, where, item) for where, item in items]
        if not any(c.weight for c in criteria):
            raise _error(doc, (*items[0][0], "weight"), ALL_ZERO)
        _check_totals(doc, [(where, c) for (where, _), c in zip(items, criteria, strict=True)])
        return cls(criteria)

    @classmethod
    def from_yaml(cls, text: str, source: str = "<yaml>") -> CriteriaRubric:
        """Build from YAML text."""
        return cls._from_document(_load_text(text, source, "yaml"))

    @classmethod
    def from_json(cls, text: str, source: str = "<json>") -> CriteriaRubric:
        """Build from JSON text."""
        return cls._from_document(_load_text(text, source, "json"))

    @classmethod
    def from_file(cls, file: str | os.PathLike[str] | IO[str] | IO[bytes]) -> CriteriaRubric:
        """Build from a path or an open (named) file; ``.json`` is JSON, anything else YAML."""
        if isinstance(file, str | os.PathLike):
            path = Path(file)
            try:
                text = read_text(path)
            except FileLoadError as exc:
                raise CriteriaLoadError(exc.file, exc.reason, exc.line) from None
            except OSError as exc:
                raise CriteriaLoadError(path, f"cannot read: {exc}") from exc
            name = str(path)
        else:
            raw = file.read()
            name = str(getattr(file, "name", "<file>"))
            try:
                text = raw.decode("utf-8-sig") if isinstance(raw, bytes) else raw
            except UnicodeDecodeError as exc:
                raise CriteriaLoadError(name, f"not UTF-8 ({exc.reason} at offset {exc.start})") from None
        kind: Literal["yaml", "json"] = "json" if name.lower().endswith(".json") else "yaml"
        return cls._from_document(_load_text(text, name, kind))

    def to_dict(self) -> list[dict[str, Any]]:
        """The criteria as a flat list of plain dicts."""
        return [c.model_dump(exclude_none=True, exclude_defaults=True) for c in self.criteria]

    async def grade(
        self,
        to_grade: ToGrade,
        autograder: Grader | None = None,
        query: str | None = None,
        reference: str | None = None,
    ) -> EvaluationReport:
        """Grade one response (text, or a dict with ``thinking`` and ``output``); ``reference``, a reference
        answer, is shown to an LLM judge."""
        grader = autograder or self.autograder
        if grader is None:
            raise ValueError(
                "no autograder: pass grade(..., autograder=...) or CriteriaRubric(criteria, autograder=...)"
            )
        return await grader.grade(self.criteria, to_grade, query=query, reference=reference)

    def metric_name(self, index: int) -> str:
        """The metric key of criterion ``index``: ``criterion/<index>`` or ``criterion/<index>_<name>``."""
        name = self.criteria[index].name
        return f"criterion/{index}_{name}" if name else f"criterion/{index}"

    def as_rubric(
        self, autograder: Grader | None = None, weight: float = 1.0, name: str = "criteria"
    ) -> Rubric:
        """A ``Rubric``: the graded score is the reward, each criterion's verdict (1.0 MET) a metric."""
        grader = autograder or self.autograder
        if grader is None:
            raise ValueError("as_rubric needs an autograder")
        reports = _SharedReports(self, grader)

        async def score(
            prompt: Messages | str | None, completion: Messages | str | None, state: Any
        ) -> float:
            return (await reports.get(prompt, completion, state)).score

        score.__name__ = name
        rubric = Rubric(funcs=[score], weights=[weight])
        if grader.gives_verdicts:
            for i in range(len(self.criteria)):
                rubric.add_metric(reports.verdict_metric(i, self.metric_name(i)))
        return rubric


class _SharedReports:
    """One grading per rollout, shared by the score function and every criterion metric of that rollout."""

    def __init__(self, rubric: CriteriaRubric, grader: Grader) -> None:
        self.rubric = rubric
        self.grader = grader
        self.consumers = 1 + (len(rubric.criteria) if grader.gives_verdicts else 0)
        self._pending: dict[int, tuple[Any, Any, int]] = {}  # id(state) -> (state, task, reads left)

    async def get(
        self, prompt: Messages | str | None, completion: Messages | str | None, state: Any
    ) -> EvaluationReport:
        """The rollout's report: graded by the first caller, awaited by the others."""
        key = id(state)
        if key not in self._pending:
            query = _last_user_text(prompt)
            task = asyncio.ensure_future(
                self.rubric.grade(response_text(completion), self.grader, query=query)
            )
            self._pending[key] = (state, task, self.consumers)
        held_state, task, left = self._pending[key]
        if left <= 1:
            del self._pending[key]
        else:
            self._pending[key] = (held_state, task, left - 1)
        report: EvaluationReport = await task
        return report

    def verdict_metric(self, index: int, metric: str) -> Any:
        async def verdict(
            prompt: Messages | str | None, completion: Messages | str | None, state: Any
        ) -> float:
            try:
                report = (await self.get(prompt, completion, state)).report
            except Exception:  # the score function reports this rollout's failure once, as errors/<name>
                return math.nan
            if report is None:
                return math.nan
            return 1.0 if report[index].verdict == "MET" else 0.0

        verdict.__name__ = metric
        return verdict


def _last_user_text(prompt: Messages | str | None) -> str | None:
    if prompt is None or isinstance(prompt, str):
        return prompt
    for message in reversed(prompt):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])
    return render_messages(prompt) or None
