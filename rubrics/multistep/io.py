"""YAML in and out for multi-step rubrics and scenarios (format version 1).

Loading uses ``yaml.safe_load`` only: no Python object is ever constructed from a YAML tag. Every load
error names the file, the entry and the field. Saving then loading gives back an equal rubric.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from rubrics.loading import FileLoadError, load_yaml_file, read_text
from rubrics.multistep.judging import judge_from_dict
from rubrics.multistep.requirements import REQUIREMENT_TYPES, Requirement
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.scenario import Scenario

FORMAT_VERSION = 1
"""The version written by this code, and the only one it reads."""

RUBRIC_KEYS = {
    "format_version",
    "name",
    "description",
    "judges",
    "default_judge",
    "reward_strategy",
    "roots",
    "requirements",
}
REQUIREMENT_KEYS = {"name", "type", "question", "dependencies", "judge", "rules"}
SCENARIO_KEYS = {
    "name",
    "description",
    "hidden_description",
    "prompt",
    "completion",
    "answers",
    "revealed_info",
}


class RubricFileError(ValueError):
    """A rubric or scenario file is malformed; the message names the file, the entry and the field."""


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


def requirement_from_dict(data: Any, where: str) -> Requirement:
    """One requirement from plain data; errors start with ``where``."""
    if not isinstance(data, Mapping):
        raise RubricFileError(f"{where}: expected a mapping, got {type(data).__name__}")
    label = f"{where} ({data.get('name')!r})" if "name" in data else where
    kind = data.get("type", "binary")
    if kind not in REQUIREMENT_TYPES:
        raise RubricFileError(
            f"{label}: field 'type' must be one of {', '.join(REQUIREMENT_TYPES)}, got {kind!r}"
        )
    cls = REQUIREMENT_TYPES[kind]
    allowed = REQUIREMENT_KEYS | set(cls.__dataclass_fields__) - {"kind"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise RubricFileError(f"{label}: unknown field(s) {unknown} for a {kind} requirement")
    for required in ("name", "question"):
        if required not in data:
            raise RubricFileError(f"{label}: field {required!r} is missing")
    for mapping_field in ("dependencies", "rules"):
        if mapping_field in data and not isinstance(data[mapping_field], Mapping | None):
            raise RubricFileError(f"{label}: field {mapping_field!r} must be a mapping of answer -> value")
    fields = {k: v for k, v in data.items() if k != "type"}
    fields["dependencies"] = dict(fields.get("dependencies") or {})
    fields["rules"] = dict(fields.get("rules") or {})
    try:
        return cls(**fields)
    except (TypeError, ValueError) as exc:
        raise RubricFileError(f"{label}: {exc}") from exc


def rubric_from_dict(data: Any, source: str = "<dict>") -> MultiStepRubric:
    """A rubric from plain data; errors name ``source``, the entry and the field."""
    if not isinstance(data, Mapping):
        raise RubricFileError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    _check_version(data, source)
    unknown = sorted(set(data) - RUBRIC_KEYS)
    if unknown:
        raise RubricFileError(
            f"{source}: unknown top-level field(s) {unknown} (allowed: {sorted(RUBRIC_KEYS)})"
        )
    items = data.get("requirements")
    if not isinstance(items, list) or not items:
        raise RubricFileError(f"{source}: field 'requirements' must be a non-empty list")
    requirements = [
        requirement_from_dict(item, f"{source}: requirements[{i}]") for i, item in enumerate(items)
    ]
    judges_data = data.get("judges") or {"rules": {"type": "rules"}}
    if not isinstance(judges_data, Mapping):
        raise RubricFileError(f"{source}: field 'judges' must map judge names to their settings")
    judges = {}
    for name, jd in judges_data.items():
        try:
            judges[str(name)] = judge_from_dict(str(name), jd)
        except ValueError as exc:
            raise RubricFileError(f"{source}: judges.{name}: {exc}") from exc
    try:
        return MultiStepRubric(
            requirements,
            judges,
            reward_strategy=data.get("reward_strategy", "level_weighted"),
            default_judge=data.get("default_judge"),
            roots=data.get("roots"),
            name=str(data.get("name", "") or ""),
            description=str(data.get("description", "") or ""),
        )
    except ValueError as exc:
        raise RubricFileError(f"{source}: {exc}") from exc


def load_rubric(path: str | Path) -> MultiStepRubric:
    """Read a rubric YAML (or JSON) file."""
    return rubric_from_dict(_read_yaml(Path(path)), str(path))


def save_rubric(rubric: MultiStepRubric, path: str | Path) -> None:
    """Write a rubric as YAML."""
    Path(path).write_text(
        yaml.safe_dump(rubric_to_dict(rubric), sort_keys=False, allow_unicode=True, width=100)
    )


# -- scenarios -------------------------------------------------------------------------------------


def scenario_from_dict(data: Any, where: str) -> Scenario:
    """One scenario from plain data; errors start with ``where``."""
    if not isinstance(data, Mapping):
        raise RubricFileError(f"{where}: expected a mapping, got {type(data).__name__}")
    label = f"{where} ({data.get('name')!r})" if "name" in data else where
    unknown = sorted(set(data) - SCENARIO_KEYS)
    if unknown:
        raise RubricFileError(f"{label}: unknown field(s) {unknown} (allowed: {sorted(SCENARIO_KEYS)})")
    for required in ("prompt", "answers"):
        if required not in data:
            raise RubricFileError(f"{label}: field {required!r} is missing")
    try:
        return Scenario(**{k: v for k, v in data.items() if v is not None or k == "completion"})
    except (TypeError, ValueError) as exc:
        raise RubricFileError(f"{label}: {_without_scenario_prefix(exc, data.get('name'))}") from exc


def load_scenarios(path: str | Path, rubric: MultiStepRubric | None = None) -> list[Scenario]:
    """Read scenarios from YAML (a ``scenarios`` list) or JSONL (one per line); validate against ``rubric``."""
    path = Path(path)
    if path.suffix == ".jsonl":
        entries, labels = _read_jsonl(path)
    else:
        data = _read_yaml(path)
        if isinstance(data, Mapping):
            _check_version(data, str(path))
            data = data.get("scenarios")
        if not isinstance(data, list) or not data:
            raise RubricFileError(f"{path}: field 'scenarios' must be a non-empty list")
        entries, labels = data, [f"{path}: scenarios[{i}]" for i in range(len(data))]
    scenarios: list[Scenario] = []
    names: set[str] = set()
    for entry, label in zip(entries, labels, strict=True):
        scenario = scenario_from_dict(entry, label)
        if scenario.name and scenario.name in names:
            raise RubricFileError(
                f"{label} ({scenario.name!r}): field 'name' {scenario.name!r} is duplicated"
            )
        names.add(scenario.name)
        if rubric is not None:
            try:
                scenario.validate(rubric)
            except ValueError as exc:
                named = f"{label} ({scenario.name!r})" if scenario.name else label
                raise RubricFileError(f"{named}: {_without_scenario_prefix(exc, scenario.name)}") from exc
        scenarios.append(scenario)
    return scenarios


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


# -- helpers ---------------------------------------------------------------------------------------


def _read_yaml(path: Path) -> Any:
    """The YAML document of ``path``, read strictly (``rubrics.loading``: UTF-8, no duplicate keys, bounded
    nesting and aliases)."""
    try:
        return load_yaml_file(path)
    except FileLoadError as exc:
        raise RubricFileError(str(exc)) from None


def _read_jsonl(path: Path) -> tuple[list[Any], list[str]]:
    try:
        text = read_text(path)
    except FileLoadError as exc:
        raise RubricFileError(str(exc)) from None
    entries, labels = [], []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise RubricFileError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
        except RecursionError:
            raise RubricFileError(f"{path}:{lineno}: not valid JSON (nested too deeply)") from None
        labels.append(f"{path}:{lineno}")
    if not entries:
        raise RubricFileError(f"{path}: no scenarios")
    return entries, labels


def _without_scenario_prefix(exc: Exception, name: Any) -> str:
    """Scenario errors start with "scenario 'x': "; the file label already names it."""
    message = str(exc)
    for prefix in (f"scenario {name!r}: ", "scenario: "):
        message = message.removeprefix(prefix)
    return message


def _check_version(data: Mapping[str, Any], source: str) -> None:
    version = data.get("format_version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise RubricFileError(
            f"{source}: field 'format_version' is {version!r}; this version reads {FORMAT_VERSION}"
        )
