"""Scenario files in and out: YAML (a ``scenarios`` list) or JSONL (one scenario per line).

Each scenario is checked against the declared schema (``schema.py``): known keys, chat messages of a known
role with string content, a string or messages as ``completion``, non-empty answers keyed by requirement
names. With a rubric it is then checked against it (``Scenario.problems``): errors raise
``RubricFileError``; warnings (a reveal that can never be shown) go to ``warn``, or raise with
``strict=True`` (``rubric-grpo rubric validate --strict``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from rubrics.error_text import field_path, show
from rubrics.loading import Document, FileLoadError, parse_jsonl
from rubrics.multistep.files import (
    FORMAT_VERSION,
    RubricFileError,
    check_version,
    error_at,
    part_at,
    read_yaml,
    validated,
)
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.scenario import Scenario, ScenarioError
from rubrics.multistep.schema import AnswerSchema, MessageSchema, ScenarioSchema

logger = logging.getLogger(__name__)

SCENARIO_FILE_KEYS = ("format_version", "rubric", "scenarios")
"""Top-level keys of a scenarios YAML file."""


def scenario_from_dict(data: Any, source: str = "<dict>") -> Scenario:
    """One scenario from plain data (shape only: ``Scenario.problems`` checks it against a rubric)."""
    return _scenario(Document(data, source), ())


def load_scenarios(
    path: str | Path,
    rubric: MultiStepRubric | None = None,
    *,
    strict: bool = False,
    warn: Callable[[RubricFileError], None] | None = None,
) -> list[Scenario]:
    """Read scenarios from YAML (a ``scenarios`` list) or JSONL (one per line); check them against
    ``rubric``. Warnings go to ``warn`` (default: the log); ``strict`` raises them as errors instead."""
    path = Path(path)
    entries = _jsonl_entries(path) if path.suffix == ".jsonl" else _yaml_entries(path)
    scenarios: list[Scenario] = []
    names: dict[str, str] = {}  # name -> where it first appeared
    for doc, where in entries:
        scenario = _scenario(doc, where)
        if scenario.name in names:
            first = names[scenario.name]
            raise error_at(
                doc, (*where, "name"), f"scenario name {scenario.name!r} is repeated (first at {first})"
            )
        if scenario.name:
            names[scenario.name] = field_path(where) or f"line {doc.line(where)}"
        if rubric is not None:
            _check(doc, where, scenario, rubric, strict, warn or _log_warning)
        scenarios.append(scenario)
    return scenarios


def _check(
    doc: Document,
    where: tuple[Any, ...],
    scenario: Scenario,
    rubric: MultiStepRubric,
    strict: bool,
    warn: Callable[[RubricFileError], None],
) -> None:
    """Raise the scenario's first error against ``rubric``; hand each warning to ``warn``."""
    try:
        warnings = scenario.validate(rubric, strict=strict)
    except ScenarioError as exc:
        raise error_at(doc, (*where, *exc.problem.where), exc.problem.reason) from None
    for problem in warnings:
        warn(error_at(doc, (*where, *problem.where), problem.reason))


def _log_warning(warning: RubricFileError) -> None:
    logger.warning("%s", warning)


def _yaml_entries(path: Path) -> list[tuple[Document, tuple[Any, ...]]]:
    doc = read_yaml(path)
    data = doc.data
    where: tuple[Any, ...] = ()
    if isinstance(data, Mapping):
        check_version(doc, data)
        for key in data:
            if key not in SCENARIO_FILE_KEYS:
                raise error_at(doc, (key,), f"unknown field (allowed: {', '.join(SCENARIO_FILE_KEYS)})")
        data, where = data.get("scenarios"), ("scenarios",)
    if not isinstance(data, list) or not data:
        raise error_at(doc, where, f"no scenarios (expected a non-empty list of scenarios, got {show(data)})")
    return [(doc, (*where, i)) for i in range(len(data))]


def _jsonl_entries(path: Path) -> list[tuple[Document, tuple[Any, ...]]]:
    try:
        lines = parse_jsonl(path)
    except FileLoadError as exc:
        raise RubricFileError(exc.file, exc.reason, exc.line) from None
    if not lines:
        raise RubricFileError(path, "no scenarios (expected one JSON object per line)")
    return [(Document(data, str(path), {(): lineno}), ()) for lineno, data in lines]


def _scenario(doc: Document, where: tuple[Any, ...]) -> Scenario:
    data = part_at(doc.data, where)
    if not isinstance(data, Mapping):
        raise error_at(
            doc, where, f"wrong type (expected a mapping with a prompt and answers, got {show(data)})"
        )
    values = validated(doc, where, ScenarioSchema, data).model_dump(exclude_none=True)
    values["prompt"] = values.get("prompt")
    _check_messages(doc, (*where, "prompt"), values["prompt"], empty_ok=False)
    if "completion" in values:
        _check_messages(doc, (*where, "completion"), values["completion"], empty_ok=True)
    values["answers"] = _answers(doc, (*where, "answers"), values.get("answers"))
    try:
        return Scenario(**values)
    except ValueError as exc:
        raise error_at(doc, where, str(exc)) from None


def _check_messages(doc: Document, where: tuple[Any, ...], value: Any, empty_ok: bool) -> None:
    """A string, or a list of chat messages (each a mapping with a known ``role`` and string ``content``)."""
    if isinstance(value, str):
        if not value.strip() and not empty_ok:
            raise error_at(doc, where, "is empty (expected the text or chat messages the policy sees first)")
        return
    if not isinstance(value, list) or (not value and not empty_ok):
        raise error_at(
            doc, where, f"wrong type (expected a string or a list of chat messages, got {show(value)})"
        )
    for i, message in enumerate(value):
        if not isinstance(message, Mapping):
            expected = "a chat message {role: user, content: ...}"
            raise error_at(doc, (*where, i), f"wrong type (expected {expected}, got {show(message)})")
        validated(doc, (*where, i), MessageSchema, message)


def _answers(doc: Document, where: tuple[Any, ...], value: Any) -> dict[str, dict[str, Any]]:
    """``answers`` with every entry as ``{"answer", "reasoning"}``; names, shapes and emptiness checked."""
    if not isinstance(value, Mapping) or not value:
        expected = "a mapping of requirement name -> ground-truth answer, at least one"
        raise error_at(doc, where, f"no answers (expected {expected}, got {show(value)})")
    out: dict[str, dict[str, Any]] = {}
    for name, entry in value.items():
        place = (*where, name)
        if not isinstance(name, str):
            reason = f"wrong type for a requirement name (expected a string, got {show(name)})"
            raise error_at(doc, place, reason)
        if isinstance(entry, Mapping):
            parsed = validated(doc, place, AnswerSchema, entry)
            answer, reasoning = parsed.answer, parsed.reasoning or ""
        else:
            answer, reasoning = entry, ""
        if answer is None or answer == "" or answer == []:
            raise error_at(
                doc, place, f"empty answer (expected the ground truth of {name!r}, got {show(answer)})"
            )
        out[name] = {"answer": answer, "reasoning": reasoning}
    return out


def save_scenarios(scenarios: Sequence[Scenario], path: str | Path, rubric_name: str = "") -> None:
    """Write scenarios as YAML, or as JSONL when the path ends in ``.jsonl``."""
    path = Path(path)
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(s.to_dict(), ensure_ascii=False) + "\n" for s in scenarios))
        return
    data: dict[str, Any] = {"format_version": FORMAT_VERSION}
    if rubric_name:
        data["rubric"] = rubric_name
    data["scenarios"] = [s.to_dict() for s in scenarios]
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100))
