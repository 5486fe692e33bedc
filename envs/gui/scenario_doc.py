"""Scenarios being edited, as plain data (``Scenario.to_dict``'s shape): load, validate, save, and one
scenario's editor fields and back."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from envs.gui.editor import fmt
from envs.gui.grading import parse_answer
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.rubric_io import RubricFileError, load_scenarios, save_scenarios, scenario_from_dict

ScenarioData = dict[str, Any]
"""One scenario as plain data."""
TEXT_FIELDS = ("name", "description", "hidden_description", "completion")
"""Scenario fields edited as plain text."""


def load(path: str, rubric: MultiStepRubric | None = None) -> list[ScenarioData]:
    """Scenarios of a YAML or JSONL file, validated against ``rubric`` when given."""
    return [s.to_dict() for s in load_scenarios(path, rubric)]


def problems(scenarios: list[ScenarioData], rubric: MultiStepRubric | None) -> dict[int, str]:
    """The library's complaint about each invalid scenario, by index (names must also be unique)."""
    out: dict[int, str] = {}
    seen: set[str] = set()
    for i, data in enumerate(scenarios):
        label = f"scenarios[{i}]"
        try:
            scenario = scenario_from_dict(copy.deepcopy(data), label)
            if rubric is not None:
                scenario.validate(rubric)
        except (RubricFileError, ValueError) as exc:
            out[i] = str(exc)
            continue
        if scenario.name and scenario.name in seen:
            out[i] = f"{label}: field 'name' {scenario.name!r} is duplicated"
        seen.add(scenario.name)
    return out


def save(scenarios: list[ScenarioData], path: str, rubric: MultiStepRubric | None, rubric_name: str) -> None:
    """Write through the library (``ValueError`` and nothing written when any scenario is invalid)."""
    bad = problems(scenarios, rubric)
    if bad:
        raise ValueError(next(iter(bad.values())))
    save_scenarios([scenario_from_dict(copy.deepcopy(s), "scenario") for s in scenarios], path, rubric_name)


def fields_from_scenario(data: ScenarioData, requirement_names: list[str]) -> dict[str, Any]:
    """Editor fields: the text fields, ``prompt`` (text, or YAML for a list of messages), and per
    requirement ``answer_<name>``, ``reasoning_<name>`` and ``reveal_<name>``."""
    fields: dict[str, Any] = {k: str(data.get(k) or "") for k in TEXT_FIELDS}
    prompt = data.get("prompt", "")
    fields["prompt"] = prompt if isinstance(prompt, str) else yaml.safe_dump(prompt, sort_keys=False)
    answers = data.get("answers") or {}
    reveals = data.get("revealed_info") or {}
    for name in _ordered(requirement_names, answers, reveals):
        entry = answers.get(name)
        value = entry.get("answer") if isinstance(entry, dict) else entry
        if isinstance(value, list):
            fields[f"answer_{name}"] = ", ".join(fmt(v) for v in value)
        else:
            fields[f"answer_{name}"] = "" if value is None else fmt(value)
        fields[f"reasoning_{name}"] = str(entry.get("reasoning", "") if isinstance(entry, dict) else "")
        fields[f"reveal_{name}"] = str(reveals.get(name, ""))
    return fields


def scenario_from_fields(fields: dict[str, Any], requirement_names: list[str]) -> ScenarioData:
    """Plain data from editor fields (a blank answer means the scenario does not answer it)."""
    data: ScenarioData = {}
    for key in ("name", "description", "hidden_description"):
        if str(fields.get(key) or "").strip():
            data[key] = str(fields[key]).strip()
    prompt_text = str(fields.get("prompt") or "")
    try:
        parsed = yaml.safe_load(prompt_text) if prompt_text.lstrip().startswith("- ") else None
    except yaml.YAMLError:
        parsed = None
    is_messages = isinstance(parsed, list) and all(isinstance(m, dict) and "role" in m for m in parsed)
    data["prompt"] = parsed if is_messages else prompt_text
    if str(fields.get("completion") or ""):
        data["completion"] = str(fields["completion"])
    answers: dict[str, Any] = {}
    reveals: dict[str, str] = {}
    typed = {k.removeprefix("answer_"): 1 for k in fields if k.startswith("answer_")}
    for name in _ordered(requirement_names, typed):
        try:
            value = parse_answer(str(fields.get(f"answer_{name}") or ""))
        except ValueError:
            value = str(fields.get(f"answer_{name}"))  # left for the library to reject, by name
        if value is None:
            continue
        reasoning = str(fields.get(f"reasoning_{name}") or "").strip()
        answers[name] = {"answer": value, "reasoning": reasoning} if reasoning else {"answer": value}
        reveal = str(fields.get(f"reveal_{name}") or "")
        if reveal.strip():
            reveals[name] = reveal
    data["answers"] = answers
    if reveals:
        data["revealed_info"] = reveals
    return data


def _ordered(names: list[str], *mappings: dict[str, Any]) -> list[str]:
    """``names``, then any other key of ``mappings`` (answers to requirements the rubric lacks)."""
    out = list(names)
    for mapping in mappings:
        out += [str(k) for k in mapping if str(k) not in out]
    return out
