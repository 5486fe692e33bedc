"""YAML in and out for multi-step rubrics (format version 1); scenario files are ``scenario_io.py``'s,
re-exported here.

One way through: a file is read through ``rubrics.loading`` (UTF-8, no Python objects from tags, duplicate
keys refused, bounded nesting and aliases), each part is checked against its schema (``schema.py``: the
fields of the class it builds), and the checked part builds its object (requirements, judges, the strategy,
then the rubric with its DAG). Every error is a ``RubricFileError`` in the loaders'
message style, ``FILE:LINE: where.in.the.document: what is wrong (expected X, got Y)``. Saving then loading
gives back an equal rubric.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from rubrics.error_text import show
from rubrics.loading import Document
from rubrics.multistep.files import (
    FORMAT_VERSION,
    RubricFileError,
    check_version,
    error_at,
    read_yaml,
    validated,
)
from rubrics.multistep.judging import JUDGE_TYPES, RequirementJudge
from rubrics.multistep.lint import RuleWarning, rule_warnings
from rubrics.multistep.requirements import REQUIREMENT_TYPES, Requirement
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.scenario_io import load_scenarios, save_scenarios, scenario_from_dict
from rubrics.multistep.schema import JUDGE_SCHEMAS, REQUIREMENT_SCHEMAS, RubricSchema, StrategySchema
from rubrics.multistep.strategies import PARAMS, STRATEGIES, RewardStrategy

__all__ = [
    "FORMAT_VERSION",
    "RubricFileError",
    "load_rubric",
    "load_scenarios",
    "requirement_from_dict",
    "requirement_to_dict",
    "rubric_from_dict",
    "rubric_to_dict",
    "save_rubric",
    "save_scenarios",
    "scenario_from_dict",
]


# -- rubrics ---------------------------------------------------------------------------------------


def requirement_to_dict(req: Requirement) -> dict[str, Any]:
    """Plain data for one requirement."""
    data: dict[str, Any] = {"name": req.name, "type": req.kind, "question": req.question, **req.params()}
    if req.dependencies:
        data["dependencies"] = {k: list(v) for k, v in req.dependencies.items()}
    if req.judge:
        data["judge"] = req.judge
    if req.rules:
        data["rules"] = {k: dict(v) for k, v in req.rules.items()}
    return data


def rubric_to_dict(rubric: MultiStepRubric) -> dict[str, Any]:
    """Plain data for a whole rubric."""
    data: dict[str, Any] = {"format_version": FORMAT_VERSION}
    if rubric.name:
        data["name"] = rubric.name
    if rubric.description:
        data["description"] = rubric.description
    data["judges"] = {name: judge.to_dict() for name, judge in rubric.judges.items()}
    data["default_judge"] = rubric.default_judge
    data["reward_strategy"] = rubric.reward_strategy.to_dict()
    if rubric.declared_roots:
        data["roots"] = list(rubric.declared_roots)
    data["requirements"] = [requirement_to_dict(r) for r in rubric.requirements]
    return data


def requirement_from_dict(data: Any, where: str = "<dict>") -> Requirement:
    """One requirement from plain data; errors name ``where``."""
    return _requirement(Document(data, where), (), data)


def rubric_from_dict(data: Any, source: str = "<dict>") -> MultiStepRubric:
    """A rubric from plain data; errors name ``source``, the entry and the field."""
    return _rubric(Document(data, source))


def _rubric(doc: Document) -> MultiStepRubric:
    if not isinstance(doc.data, Mapping):
        raise error_at(doc, (), f"wrong type (expected a mapping of rubric fields, got {show(doc.data)})")
    check_version(doc, doc.data)
    top = validated(doc, (), RubricSchema, doc.data)
    requirements = [_requirement(doc, ("requirements", i), item) for i, item in enumerate(top.requirements)]
    judges_data = top.judges if top.judges is not None else {"rules": {"type": "rules"}}
    judges = {name: _judge(doc, name, settings) for name, settings in judges_data.items()}
    strategy = _strategy(doc, top.reward_strategy)
    try:
        return MultiStepRubric(
            requirements,
            judges,
            reward_strategy=strategy,
            default_judge=top.default_judge,
            roots=top.roots,
            name=top.name,
            description=top.description,
        )
    except ValueError as exc:
        raise _graph_error(doc, str(exc)) from None


def _requirement(doc: Document, where: tuple[Any, ...], data: Any) -> Requirement:
    if not isinstance(data, Mapping):
        raise error_at(
            doc, where, f"wrong type (expected a mapping with a name and a question, got {show(data)})"
        )
    kind = data.get("type", "binary")
    if not isinstance(kind, str) or kind not in REQUIREMENT_SCHEMAS:
        raise error_at(
            doc,
            (*where, "type"),
            f"unknown requirement type (expected one of {', '.join(REQUIREMENT_TYPES)}, got {show(kind)})",
        )
    values = validated(doc, where, REQUIREMENT_SCHEMAS[kind], data).model_dump(
        exclude_none=True, exclude={"type"}
    )
    try:
        return REQUIREMENT_TYPES[kind](**values)
    except ValueError as exc:
        reason = str(exc).removeprefix(f"requirement {values['name']!r}: ")
        raise error_at(doc, where, reason) from None


def _judge(doc: Document, name: str, data: Any) -> RequirementJudge:
    where = ("judges", name)
    kind = data.get("type") if isinstance(data, Mapping) else None
    if not isinstance(kind, str) or kind not in JUDGE_SCHEMAS:
        got = show(kind) if isinstance(data, Mapping) else show(data)
        place = (*where, "type") if isinstance(data, Mapping) else where
        raise error_at(doc, place, f"unknown judge type (expected 'rules' or 'llm', got {got})")
    values = validated(doc, where, JUDGE_SCHEMAS[kind], data).model_dump(exclude_none=True, exclude={"type"})
    return JUDGE_TYPES[kind].from_file(name, values)


def _strategy(doc: Document, data: Any) -> RewardStrategy:
    where = ("reward_strategy",)
    if isinstance(data, str):
        if data not in STRATEGIES:
            raise error_at(
                doc,
                where,
                f"unknown reward strategy (expected one of {', '.join(STRATEGIES)}, got {show(data)})",
            )
        return RewardStrategy(type=data)
    if not isinstance(data, Mapping):
        raise error_at(
            doc, where, f"wrong type (expected a strategy name or a mapping with a type, got {show(data)})"
        )
    values = validated(doc, where, StrategySchema, data).model_dump(exclude_none=True)
    allowed = PARAMS.get(values["type"], {})
    foreign = [param for param in values if param not in ("type", "normalized", *allowed)]
    if foreign:
        reason = (
            f"not a parameter of the {values['type']!r} strategy (allowed: {', '.join(allowed) or 'none'})"
        )
        raise error_at(doc, (*where, foreign[0]), reason)
    try:
        return RewardStrategy.from_dict(values)
    except ValueError as exc:
        raise error_at(doc, where, str(exc).removeprefix("reward strategy: ")) from None


def _graph_error(doc: Document, message: str) -> RubricFileError:
    """A DAG or judge error (``requirement 'x': ...``), placed at requirement x's entry when it names one."""
    items = doc.data.get("requirements") if isinstance(doc.data, Mapping) else None
    for i, item in enumerate(items if isinstance(items, list) else []):
        name = item.get("name") if isinstance(item, Mapping) else None
        prefix = f"requirement {name!r}: "
        if isinstance(name, str) and message.startswith(prefix):
            return error_at(doc, ("requirements", i), message.removeprefix(prefix))
    field = re.match(r"field '(\w+)':? (.*)", message)
    if field and isinstance(doc.data, Mapping) and field[1] in doc.data:
        return error_at(doc, (field[1],), field[2])
    return RubricFileError(doc.file, message)


def load_rubric(
    path: str | Path,
    *,
    strict: bool = False,
    warn: Callable[[RubricFileError], None] | None = None,
) -> MultiStepRubric:
    """Read a rubric YAML (or JSON) file. With ``warn``, each doubt about a rule (``rubrics.multistep.lint``)
    is passed to it at the rule's line; ``strict`` raises the first one as an error instead."""
    doc = read_yaml(Path(path))
    rubric = _rubric(doc)
    if strict or warn is not None:
        for warning in rule_warnings(rubric.requirements):
            error = _rule_warning(doc, warning)
            if strict:
                raise error
            assert warn is not None
            warn(error)
    return rubric


def _rule_warning(doc: Document, warning: RuleWarning) -> RubricFileError:
    """``warning`` placed at its rule in ``doc`` (the answer key as the file spells it)."""
    items = doc.data["requirements"]
    index = next(i for i, item in enumerate(items) if item.get("name") == warning.requirement)
    raw_keys = list(items[index].get("rules") or {})
    key = next((k for k in raw_keys if _same_answer(k, warning.answer)), warning.answer)
    return error_at(doc, ("requirements", index, "rules", key), warning.message)


def _same_answer(raw: Any, value: Any) -> bool:
    try:
        return float(raw) == float(value)
    except (TypeError, ValueError):
        return False


def save_rubric(rubric: MultiStepRubric, path: str | Path) -> None:
    """Write a rubric as YAML."""
    Path(path).write_text(
        yaml.safe_dump(rubric_to_dict(rubric), sort_keys=False, allow_unicode=True, width=100)
    )
