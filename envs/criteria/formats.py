"""The record formats of per-prompt criteria datasets (``docs/criteria_data.md``): the project's own
(``native``), OpenAI's HealthBench (``healthbench``) and Scale AI's RaR (``rar``); how each is told apart and
converted into ``CriteriaExample``'s fields, and how a validation error is moved back to the source
format's field names."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from rubrics.criteria.criterion import WeightTotalError
from rubrics.error_text import show
from rubrics.loading import FileLoadError, Place

FORMATS = ("native", "healthbench", "rar")
"""The record formats ``load_criteria_examples`` reads (``auto`` detects one of them)."""

_NEEDS = {
    "native": "'criteria' (with 'id' and 'prompt')",
    "healthbench": "'prompt' and 'rubrics' (with 'prompt_id')",
    "rar": "'question' and 'rubric' (with 'reference_answer')",
}


@dataclass(frozen=True)
class Converted:
    """A record in ``CriteriaExample``'s fields, and where each field came from (for error messages)."""

    fields: dict[str, Any]
    """The ``CriteriaExample`` fields."""
    top: dict[str, Place] = field(default_factory=dict)
    """A top-level field's place in the source record, where it differs (``id`` -> ``("prompt_id",)``)."""
    item: dict[str, str] = field(default_factory=dict)
    """A criterion field's key in the source's criterion, where it differs (``weight`` -> ``points``)."""
    warnings: list[tuple[Place, str]] = field(default_factory=list)
    """What was read but ignored, each at its place in the source record (``("rubrics", 0, "reviewer")``)
    with the reason: a key the format does not know inside a criterion, a ``rubric_count`` that disagrees
    with the criteria present."""

    def source(self, loc: Sequence[Any]) -> Place:
        """The place in the source record of ``loc``, a place in ``fields``."""
        if not loc:
            return ()
        head, *rest = loc
        if head == "criteria" and len(rest) >= 2 and isinstance(rest[0], int):
            rest[1] = self.item.get(rest[1], rest[1])
        return (*self.top.get(head, (head,)), *rest)


def detect_format(record: Mapping[str, Any], source: str) -> str:
    """The format of ``record``: ``native`` with ``criteria``, ``healthbench`` with ``rubrics`` and
    ``prompt``, ``rar`` with ``rubric`` and ``question``.

    Raises:
        FileLoadError: none fits; names ``source``, the keys found and the keys each format needs."""
    if "criteria" in record:
        return "native"
    if "rubrics" in record and "prompt" in record:
        return "healthbench"
    if "rubric" in record and "question" in record:
        return "rar"
    found = ", ".join(repr(str(key)) for key in record) or "none"
    needs = "; ".join(f"{name} needs {keys}" for name, keys in _NEEDS.items())
    raise FileLoadError(
        source,
        f"cannot tell the criteria format from the first record: its keys are {found} ({needs}); "
        f"name the format with env.format (--format) if it is one of {', '.join(FORMATS)}",
    )


def _native(record: Mapping[str, Any]) -> Converted:
    return Converted(dict(record))


def _healthbench(record: Mapping[str, Any]) -> Converted:
    """HealthBench: ``prompt_id``, ``prompt``, ``rubrics: [{criterion, points, tags}]``, ``example_tags``;
    ``ideal_completions_data.ideal_completion`` is the reference answer; other keys are ignored (inside a
    criterion, with a warning)."""
    fields = _present(record, id="prompt_id", prompt="prompt", criteria="rubrics", tags="example_tags")
    if isinstance(fields.get("criteria"), list):
        names = {"weight": "points", "requirement": "criterion", "tags": "tags"}
        fields["criteria"] = [_present(item, **names) for item in fields["criteria"]]
    ideal = record.get("ideal_completions_data")
    if isinstance(ideal, Mapping) and isinstance(ideal.get("ideal_completion"), str):
        fields["reference_answer"] = ideal["ideal_completion"]
    return Converted(
        fields,
        top={"id": ("prompt_id",), "criteria": ("rubrics",), "tags": ("example_tags",)},
        item={"weight": "points", "requirement": "criterion"},
        warnings=_unknown_keys(record, "rubrics", ("criterion", "points", "tags"), "HealthBench"),
    )


def _rar(record: Mapping[str, Any]) -> Converted:
    """RaR: ``question``, ``reference_answer``, ``rubric: [{title, description, weight}]``; the id is the
    record's ``id`` or ``question_id``, else ``rar-`` and 12 hex digits of the question's SHA-1. Other keys
    are ignored (inside a criterion, or a ``rubric_count`` that disagrees with ``rubric``, with a warning)."""
    fields = _present(record, prompt="question", criteria="rubric", reference_answer="reference_answer")
    if isinstance(fields.get("criteria"), list):
        names = {"weight": "weight", "requirement": "description", "name": "title"}
        fields["criteria"] = [_present(item, **names) for item in fields["criteria"]]
    key = next((k for k in ("id", "question_id") if k in record), None)
    if key is not None:
        given = record[key]
        fields["id"] = str(given) if isinstance(given, int) and not isinstance(given, bool) else given
    elif isinstance(record.get("question"), str):
        fields["id"] = "rar-" + hashlib.sha1(record["question"].encode()).hexdigest()[:12]
    return Converted(
        fields,
        top={"id": (key or "question",), "prompt": ("question",), "criteria": ("rubric",)},
        item={"requirement": "description", "name": "title"},
        warnings=_unknown_keys(record, "rubric", ("title", "description", "weight"), "RaR")
        + _rubric_count(record),
    )


def _unknown_keys(
    record: Mapping[str, Any], criteria: str, known: Sequence[str], fmt: str
) -> list[tuple[Place, str]]:
    """A warning for each key of a criterion in ``record[criteria]`` that is not one of ``known``: it is
    ignored, and the criterion graded on the keys that are known."""
    items = record.get(criteria)
    if not isinstance(items, list):
        return []
    keys = ", ".join(known[:-1]) + f" and {known[-1]}"
    return [
        ((criteria, i, key), f"unknown key, ignored (a {fmt} criterion has {keys})")
        for i, item in enumerate(items)
        if isinstance(item, Mapping)
        for key in item
        if key not in known
    ]


def _rubric_count(record: Mapping[str, Any]) -> list[tuple[Place, str]]:
    """A warning when RaR's ``rubric_count`` is not the number of criteria in ``rubric``: the criteria
    present are graded."""
    items, count = record.get("rubric"), record.get("rubric_count")
    if not isinstance(items, list) or count is None or (type(count) is int and count == len(items)):
        return []
    present = f"the criteria in 'rubric' ({len(items)}) are graded"
    if type(count) is not int:
        return [(("rubric_count",), f"wrong type (expected a whole number, got {show(count)}); {present}")]
    return [(("rubric_count",), f"says {count} criteria, but 'rubric' holds {len(items)}; {present}")]


def _present(record: Any, **names: str) -> Any:
    """``{field: record[key]}`` for each ``field=key`` that ``record`` has (a non-mapping as it is, for the
    schema to refuse)."""
    if not isinstance(record, Mapping):
        return record
    return {name: record[key] for name, key in names.items() if key in record}


_CONVERTERS: dict[str, Callable[[Mapping[str, Any]], Converted]] = {
    "native": _native,
    "healthbench": _healthbench,
    "rar": _rar,
}


def convert(record: Mapping[str, Any], fmt: str) -> Converted:
    """``record``, one record of format ``fmt`` (one of ``FORMATS``), in ``CriteriaExample``'s fields."""
    return _CONVERTERS[fmt](record)


def in_source(exc: ValidationError, converted: Converted) -> ValidationError:
    """``exc`` with its locations moved to the source format's fields; of the two branches of a prompt
    (a string, or a list of messages) only the errors of the branch the record wrote are kept, the
    "at least 1 item" echo of a criteria list whose items failed is dropped, a weight written as text is
    named as such, and a total of the weights that overflows is placed at the weight that takes it past
    the largest float."""
    prompt = converted.fields.get("prompt")
    kept: list[dict[str, Any]] = []
    seen: set[tuple[str, Place]] = set()
    for err in exc.errors():
        kind, loc, ctx = err["type"], list(err["loc"]), err.get("ctx")
        if loc[:1] == ["prompt"] and len(loc) > 1 and isinstance(loc[1], str):
            if not isinstance(prompt, str | list):
                kind, loc, ctx = "value_error", loc[:1], {"error": _prompt_type(prompt)}
            elif not isinstance(prompt, str if loc[1] == "str" else list):
                continue
            else:
                del loc[1]
        if kind == "too_short" and loc == ["criteria"] and converted.fields.get("criteria"):
            continue
        if kind == "float_type" and _looks_numeric(err["input"]):
            kind, ctx = "value_error", {"error": _text_number(err["input"])}
        if ctx is not None and isinstance(ctx.get("error"), WeightTotalError):
            loc = ["criteria", ctx["error"].index, "weight"]  # the weight at which the total overflows
        place = converted.source(loc)
        if (kind, place) in seen:
            continue
        seen.add((kind, place))
        kept.append({"type": kind, "loc": place, "input": err["input"], **({"ctx": ctx} if ctx else {})})
    return ValidationError.from_exception_data(exc.title, kept)  # type: ignore[arg-type]


def _looks_numeric(value: Any) -> bool:
    """Whether ``value`` is a number written as text (``"5"``, ``" 5 "``, ``"1e400"``)."""
    if not isinstance(value, str):
        return False
    try:
        float(value)
    except ValueError:
        return False
    return True


def _text_number(text: str) -> ValueError:
    """A number written as text: refused in every format (``docs/criteria_data.md``), since the formats'
    published data writes numbers, and reading text would take ``"1e400"`` or ``" 5 "`` as whatever
    ``float`` makes of it."""
    return ValueError(
        f"wrong type (expected a number, got the text {show(text)}: a number written as text is not read, "
        "in any format; write it without quotes)"
    )


def _prompt_type(prompt: Any) -> ValueError:
    return ValueError(
        f"wrong type (expected a string or a list of messages {{role, content}}, got {show(prompt)})"
    )
