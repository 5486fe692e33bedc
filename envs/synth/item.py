"""One planned item from hidden description to validated, re-graded scenario: a record, kept or dropped.

The record is plain JSON and holds only what the requests returned and what the checks decided (no
timings), so a resumed run that finds it on disk gets the same final output as a run that never stopped.

Drop reasons, in the order they can happen: ``hidden_failed`` and ``scenario_failed`` (no usable reply
after the client's retries: faults, not JSON, cut at ``max_tokens``), ``invalid`` (loader checks) and
``off_path`` (path checks) after the one repair request, ``regrade_ideal_failed``, ``regrade_wrong_passed``
and ``regrade_error`` (re-grading). ``duplicate`` is decided over all records at the end (``dedupe``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.synth.generate import GenerationError, Generator, parse_json_object
from envs.synth.plan import PlannedItem
from envs.synth.prompts import (
    HIDDEN_SCHEMA,
    hidden_messages,
    repair_messages,
    scenario_messages,
    scenario_schema,
)
from envs.synth.regrade import regrade
from envs.synth.validate import CheckError, check_scenario
from rubrics.judges.base import JudgeError
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.scenario import Scenario

DROP_REASONS = (
    "hidden_failed",
    "scenario_failed",
    "invalid",
    "off_path",
    "regrade_ideal_failed",
    "regrade_wrong_passed",
    "regrade_error",
    "duplicate",
)
"""Every reason an item can be dropped for (the report counts each, zeros included)."""


@dataclass
class ItemContext:
    """What every item needs."""

    rubric: MultiStepRubric
    """The rubric scenarios are made for."""
    generator: Generator
    """Where the text comes from."""
    scratch: Path
    """A folder for the loader check's temporary files."""
    regrade: bool = True
    """Whether to validate by re-grading."""


def parse_hidden(text: str) -> tuple[str, dict[str, Any]]:
    """A hidden-description reply; ``ValueError`` (retried) without a non-empty ``hidden_description``."""
    raw, data = parse_json_object(text)
    hidden = data.get("hidden_description")
    if not isinstance(hidden, str) or not hidden.strip():
        raise ValueError("the reply has no non-empty string 'hidden_description'")
    if not isinstance(data.get("description", ""), str):
        raise ValueError("field 'description' must be a string")
    return raw, data


def scenario_name(rubric: MultiStepRubric, item: PlannedItem) -> str:
    """The scenario's name: the rubric's name and the item id (unique, stable)."""
    return f"{rubric.name or 'synthetic'}_{item.id}"


async def make_item(item: PlannedItem, ctx: ItemContext) -> dict[str, Any]:
    """Generate, check, repair once, re-grade; the item's record."""
    record: dict[str, Any] = {"id": item.id, "index": item.index, "planned": item.answers}
    record["repair"] = None
    try:
        _, hidden = await ctx.generator.complete(
            hidden_messages(ctx.rubric, item), parse_hidden, HIDDEN_SCHEMA, "hidden_description"
        )
    except GenerationError as exc:
        return _drop(record, "hidden_failed", str(exc))
    record["description"] = " ".join(str(hidden.get("description", "")).split())
    record["hidden_description"] = hidden["hidden_description"].strip()
    messages = scenario_messages(ctx.rubric, item, record["hidden_description"])
    schema = scenario_schema(ctx.rubric, item)
    try:
        reply, data = await ctx.generator.complete(messages, parse_json_object, schema, "scenario")
    except GenerationError as exc:
        return _drop(record, "scenario_failed", str(exc))
    try:
        scenario = _check(data, item, ctx, record)
    except CheckError as first:
        record["repair"] = {"problem": f"{first.reason}: {first}", "passed": False}
        try:
            reply, data = await ctx.generator.complete(
                repair_messages(messages, reply, str(first)), parse_json_object, schema, "scenario"
            )
            scenario = _check(data, item, ctx, record)
            record["repair"]["passed"] = True
        except GenerationError as exc:
            return _drop(record, first.reason, f"{first} (the repair request failed: {exc})")
        except CheckError as second:
            return _drop(record, second.reason, f"{second} (after one repair)")
    record["scenario"] = scenario.to_dict()
    record["ideal_replies"] = {n: data["ideal_replies"][n] for n in item.path}
    record["wrong_reply"] = data.get("wrong_reply") if item.wrong else None
    if ctx.regrade:
        try:
            record["regrade"] = await regrade(
                ctx.rubric, scenario, item, record["ideal_replies"], record["wrong_reply"]
            )
        except CheckError as exc:
            return _drop(record, exc.reason, str(exc))
        except (JudgeError, ValueError) as exc:
            return _drop(record, "regrade_error", f"{type(exc).__name__}: {exc}")
    record["status"] = "kept"
    return record


def _check(data: dict[str, Any], item: PlannedItem, ctx: ItemContext, record: dict[str, Any]) -> Scenario:
    return check_scenario(
        data,
        item,
        ctx.rubric,
        name=scenario_name(ctx.rubric, item),
        description=record["description"],
        hidden=record["hidden_description"],
        scratch=ctx.scratch,
    )


def _drop(record: dict[str, Any], reason: str, detail: str) -> dict[str, Any]:
    record.update(status="dropped", reason=reason, detail=detail[:2000])
    return record
