"""Requirements: the nodes of a multi-step rubric.

A requirement asks one question about the model's reply. Its ``dependencies`` map a judged answer to the
names of the requirements that answer unlocks (no entry, or an empty list, means terminal). Each type has
the judge response format of its answer domain.

Routing rule for continuous answers: an answer that is not itself a dependency key routes to the branch of
the **nearest** key (ties go to the smaller key). Binary and discrete answers route by exact value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictStr

from rubrics.error_text import show
from rubrics.judges.formats import (
    BinaryJudgeResponseFormat,
    ContinuousJudgeResponseFormat,
    DiscreteJudgeResponseFormat,
    JudgeFormatError,
    JudgeResponseFormat,
    UnitVectorJudgeResponseFormat,
)
from rubrics.multistep.files import InFile, Number, Text, distinct

Answer = float | list[float]
"""A judged or ground-truth answer: a number, or a probability vector for unit-vector requirements."""


@dataclass(kw_only=True)
class Requirement:
    """One question of a multi-step rubric; its fields are those of a requirement in a rubric file
    (``rubrics.multistep.files.file_schema``), beside the ``type`` key that names its class."""

    kind: ClassVar[str] = ""
    """The ``type`` name used in YAML."""

    name: Text
    """Unique, identifier-like name; metrics are ``req/<name>``."""
    question: Text
    """What an LLM judge is asked about the model's reply."""
    dependencies: Annotated[dict[Any, list[str]], InFile(dict[Any, list[Text] | None] | None)] = field(
        default_factory=dict
    )
    """Judged answer -> names of the requirements it unlocks. Empty (or a branch of nothing): terminal."""
    judge: Text | None = None
    """Name of the rubric judge that answers this requirement (None: the rubric's default judge)."""
    rules: Annotated[dict[Any, dict[str, Any]], InFile(dict[Any, dict[StrictStr, Any]] | None)] = field(
        default_factory=dict
    )
    """For rule judges: answer value -> match spec (``any``/``all``/``none``/``regex``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"requirement name {self.name!r} must be an identifier (letters, digits, _)")
        if not isinstance(self.question, str) or not self.question.strip():
            raise ValueError(f"requirement {self.name!r}: field 'question' must be a non-empty string")
        self.dependencies = {
            self._key(k, "dependencies"): self._names(k, v) for k, v in self.dependencies.items()
        }
        self.rules = {self._key(k, "rules"): dict(v) for k, v in self.rules.items()}

    @property
    def response_format(self) -> JudgeResponseFormat:
        """The judge response format of this requirement's answer domain."""
        raise NotImplementedError

    @property
    def is_terminal(self) -> bool:
        """True when no answer unlocks anything."""
        return not any(self.dependencies.values())

    def children(self) -> list[str]:
        """Every requirement any answer of this one can unlock."""
        return sorted({n for names in self.dependencies.values() for n in names})

    def validate_answer(self, value: Any) -> Answer:
        """The answer in canonical form, or ``ValueError`` naming the requirement."""
        try:
            return self.response_format.validate_answer(value)
        except JudgeFormatError as exc:
            raise ValueError(f"requirement {self.name!r}: {exc}") from exc

    def is_correct(self, judged: Answer, truth: Answer) -> bool:
        """Whether a judged answer agrees with the ground truth."""
        return bool(math.isclose(float(judged), float(truth), abs_tol=1e-9))  # type: ignore[arg-type]

    def route(self, truth: Answer) -> list[str]:
        """The requirements that the ground-truth answer unlocks."""
        return list(self.dependencies.get(truth, []))

    def _key(self, key: Any, where: str) -> Any:
        try:
            return self.validate_answer(float(key) if isinstance(key, str) else key)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"requirement {self.name!r}: field '{where}' has a key outside the answer domain "
                f"(expected {self.response_format.describe_answer().rstrip('.')}, got {show(key)})"
            ) from exc

    def _names(self, key: Any, names: Any) -> list[str]:
        if names is None:
            return []
        if isinstance(names, str) or not isinstance(names, Sequence):
            raise ValueError(
                f"requirement {self.name!r}: field 'dependencies' for {key!r} must be a list of names"
            )
        return [str(n) for n in names]

    def params(self) -> dict[str, Any]:
        """The type's own fields (for YAML)."""
        return {}


@dataclass(kw_only=True)
class BinaryRequirement(Requirement):
    """A yes/no question: answers 1.0 (yes) and 0.0 (no)."""

    kind: ClassVar[str] = "binary"

    @property
    def response_format(self) -> JudgeResponseFormat:
        return BinaryJudgeResponseFormat()


class Option(BaseModel):
    """One option of a discrete requirement, as a file writes it."""

    model_config = ConfigDict(extra="forbid")

    value: Number
    """The answer value."""
    meaning: StrictStr = ""
    """What it means (shown to judges)."""


def _option_items(options: Any) -> Any:
    """Options in their list-of-mappings form: a bare number is ``{value: n}``; a mapping ``{n: meaning}``
    is one ``{value, meaning}`` per entry."""
    if isinstance(options, Mapping):
        return [{"value": value, "meaning": meaning} for value, meaning in options.items()]
    if isinstance(options, list):
        return [item if isinstance(item, Mapping) else {"value": item} for item in options]
    return options


@dataclass(kw_only=True)
class DiscreteRequirement(Requirement):
    """One of a fixed set of numeric options, each with a meaning."""

    kind: ClassVar[str] = "discrete"
    options: Annotated[
        dict[float, str],
        InFile(
            Annotated[
                list[Option],
                Field(min_length=1),
                BeforeValidator(_option_items),
                AfterValidator(distinct("option value")),
            ]
        ),
    ]
    """Allowed answers and what each means (a file lists them: bare numbers, ``{value, meaning}``
    mappings, or one ``{value: meaning}`` mapping)."""

    def __post_init__(self) -> None:
        if isinstance(self.options, Sequence):
            self.options = _options_from_list(self.name, self.options)
        if not self.options:
            raise ValueError(f"requirement {self.name!r}: field 'options' needs at least one option")
        self._format = DiscreteJudgeResponseFormat(self.options)
        self.options = dict(self._format.options)
        super().__post_init__()

    @property
    def response_format(self) -> JudgeResponseFormat:
        return self._format

    def params(self) -> dict[str, Any]:
        return {"options": [{"value": v, "meaning": m} for v, m in self.options.items()]}


@dataclass(kw_only=True)
class ContinuousRequirement(Requirement):
    """Any number in ``[low, high]``; routes to the nearest dependency key (ties: the smaller key).

    A judged answer is correct when it lies within ``tolerance`` of the ground truth.
    """

    kind: ClassVar[str] = "continuous"
    low: Number = 0.0
    """Smallest allowed answer."""
    high: Number = 1.0
    """Largest allowed answer."""
    tolerance: Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0)] = 0.1
    """Largest distance from the ground truth that still counts as correct."""

    def __post_init__(self) -> None:
        self._format = ContinuousJudgeResponseFormat(self.low, self.high)
        if not 0.0 <= self.tolerance <= self.high - self.low:
            raise ValueError(f"requirement {self.name!r}: field 'tolerance' must lie in [0, high - low]")
        super().__post_init__()

    @property
    def response_format(self) -> JudgeResponseFormat:
        return self._format

    def is_correct(self, judged: Answer, truth: Answer) -> bool:
        return abs(float(judged) - float(truth)) <= self.tolerance + 1e-12  # type: ignore[arg-type]

    def route(self, truth: Answer) -> list[str]:
        if not self.dependencies:
            return []
        key = min(self.dependencies, key=lambda k: (abs(k - float(truth)), k))  # type: ignore[arg-type]
        return list(self.dependencies[key])

    def params(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "tolerance": self.tolerance}


@dataclass(kw_only=True)
class UnitVectorRequirement(Requirement):
    """A probability vector over labels; routes by the label with the largest mass (dependency keys are
    label indices), and a judged answer is correct when its top label equals the ground truth's."""

    kind: ClassVar[str] = "unit_vector"
    labels: Annotated[list[Text], Field(min_length=2), AfterValidator(distinct("label"))]
    """The label of each position (a YAML list, not one comma-separated string)."""

    def __post_init__(self) -> None:
        if isinstance(self.labels, str) or not all(isinstance(label, str) for label in self.labels):
            raise ValueError(
                f"requirement {self.name!r}: field 'labels' must be a list of strings, "
                f"got {show(self.labels)}"
            )
        _reject_repeats(self.name, "labels", self.labels)
        self._format = UnitVectorJudgeResponseFormat(self.labels)
        super().__post_init__()

    @property
    def response_format(self) -> JudgeResponseFormat:
        return self._format

    def _key(self, key: Any, where: str) -> Any:
        try:
            number = float(key)
        except (TypeError, ValueError):
            number = -1.0
        index = int(number) if number.is_integer() else -1
        if not 0 <= index < len(self.labels):
            raise ValueError(
                f"requirement {self.name!r}: field '{where}' has a key outside the answer domain "
                f"(expected a label index 0..{len(self.labels) - 1}, got {show(key)})"
            )
        return index

    def top(self, answer: Answer) -> int:
        """Index of the label with the largest mass (first on ties)."""
        vector = list(answer)  # type: ignore[arg-type]
        return max(range(len(vector)), key=lambda i: (vector[i], -i))

    def is_correct(self, judged: Answer, truth: Answer) -> bool:
        return self.top(judged) == self.top(truth)

    def route(self, truth: Answer) -> list[str]:
        return list(self.dependencies.get(self.top(truth), []))

    def params(self) -> dict[str, Any]:
        return {"labels": list(self.labels)}


def _options_from_list(name: str, options: Sequence[Any]) -> dict[float, str]:
    pairs: list[tuple[Any, str]] = []
    for i, item in enumerate(options):
        if isinstance(item, Mapping):
            if "value" not in item:
                raise ValueError(f"requirement {name!r}: field 'options' item {i} has no 'value'")
            pairs.append((item["value"], str(item.get("meaning", ""))))
        else:
            pairs.append((item, ""))
    values = []
    for value, _ in pairs:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"requirement {name!r}: field 'options' value {show(value)} is not a number")
        values.append(float(value))
    _reject_repeats(name, "options", values)
    return {value: meaning for value, (_, meaning) in zip(values, pairs, strict=True)}


def _reject_repeats(name: str, field_name: str, values: Sequence[Any]) -> None:
    """A ``ValueError`` when ``values`` repeats one (the last would silently replace the first)."""
    seen: set[Any] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"requirement {name!r}: field {field_name!r} repeats {show(value)}")
        seen.add(value)


REQUIREMENT_TYPES: dict[str, type[Requirement]] = {
    cls.kind: cls
    for cls in (BinaryRequirement, DiscreteRequirement, ContinuousRequirement, UnitVectorRequirement)
}
"""Requirement classes by their YAML ``type``."""
