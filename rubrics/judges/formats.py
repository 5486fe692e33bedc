"""Judge response formats: the exact JSON a judge must answer with, and its strict parser.

``str(fmt)`` is the instruction a judge model reads; ``fmt.convert(text)`` turns the judge's reply into a
``JudgeResponse`` or raises ``JudgeFormatError`` saying what was wrong (not JSON, a missing key, a value
outside the options or the range). JSON wrapped in a code fence or surrounded by prose is recovered first.
Formats round-trip through plain dicts (``to_dict`` / ``format_from_dict``) keeping their type, so a YAML
rubric can name them.

Departure from the peers, on purpose: a continuous format accepts any value inside its range (0.7 is valid
for [0, 1]), not just the bounds, and a unit-vector format survives a dict round trip.
"""

from __future__ import annotations

import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any, ClassVar

REASON_MAX_CHARS = 500
"""The longest reasoning (``explanation``) the JSON schema of a structured reply allows. The parser takes a
longer one; the bound is for the server's grammar, without which a small judge model can write reasoning
until ``max_tokens`` runs out and never reach its verdict (docs/criteria.md, A real LLM judge)."""


class JudgeFormatError(ValueError):
    """A judge's reply does not fit its response format (the message says how)."""


@dataclass(frozen=True)
class JudgeResponse:
    """One parsed verdict."""

    answer: Any
    """The verdict: a float for binary, discrete and continuous formats; a list of floats for unit vectors."""
    reasoning: str = ""
    """The judge's explanation, as written."""


_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


def extract_json_object(text: str) -> dict[str, Any]:
    """The JSON object in ``text``: the whole text, a fenced block, or the first object inside prose."""
    if not isinstance(text, str):
        raise JudgeFormatError(f"not JSON: expected text, got {type(text).__name__}")
    stripped = text.strip()
    candidates = [stripped, *(m.group(1).strip() for m in _FENCE.finditer(stripped))]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", stripped):
        try:
            value, _ = decoder.raw_decode(stripped, match.start())
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    preview = stripped if len(stripped) <= 120 else stripped[:117] + "..."
    raise JudgeFormatError(f"not JSON: no JSON object found in the judge's reply {preview!r}")


def _as_number(key: str, value: Any) -> float:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, Real):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise JudgeFormatError(f"key {key!r} must be a number, got the string {value!r}") from None
    else:
        raise JudgeFormatError(f"key {key!r} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(number):
        raise JudgeFormatError(f"key {key!r} must be a finite number, got {value!r}")
    return number


class JudgeResponseFormat(ABC):
    """Base of every format: a JSON object with an answer key and a reasoning key."""

    kind: ClassVar[str] = ""
    """The ``type`` written by ``to_dict``."""

    def __init__(self, answer_key: str = "answer", reasoning_key: str = "reasoning") -> None:
        self.answer_key = answer_key
        self.reasoning_key = reasoning_key

    @abstractmethod
    def describe_answer(self) -> str:
        """One sentence: what the answer value must be."""

    @abstractmethod
    def validate_answer(self, value: Any) -> Any:
        """The answer as its canonical type, or ``JudgeFormatError``."""

    @abstractmethod
    def answer_schema(self) -> dict[str, Any]:
        """JSON schema of the answer value (for structured output)."""

    @abstractmethod
    def _params(self) -> dict[str, Any]:
        """The format's own fields for ``to_dict``."""

    def __str__(self) -> str:
        example = json.dumps({self.reasoning_key: "<your reasoning>", self.answer_key: "<answer>"})
        return (
            f"Respond with only a JSON object of the form {example}.\n"
            f'"{self.reasoning_key}": a short explanation of your verdict, written first.\n'
            f'"{self.answer_key}": {self.describe_answer()}'
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._params()!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JudgeResponseFormat) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def convert(self, text: str) -> JudgeResponse:
        """Parse a judge's reply; raise ``JudgeFormatError`` naming what was wrong."""
        obj = extract_json_object(text)
        if self.answer_key not in obj:
            raise JudgeFormatError(
                f"missing key {self.answer_key!r} in the judge's JSON (keys: {sorted(obj)})"
            )
        reasoning = obj.get(self.reasoning_key, "")
        if not isinstance(reasoning, str):
            reasoning = json.dumps(reasoning)
        return JudgeResponse(answer=self.validate_answer(obj[self.answer_key]), reasoning=reasoning)

    def json_schema(self) -> dict[str, Any]:
        """JSON schema of the whole reply object."""
        return {
            "type": "object",
            "properties": {
                self.reasoning_key: {"type": "string", "maxLength": REASON_MAX_CHARS},
                self.answer_key: self.answer_schema(),
            },
            "required": [self.reasoning_key, self.answer_key],
            "additionalProperties": False,
        }

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (``type`` plus fields); ``format_from_dict`` rebuilds the same format."""
        data: dict[str, Any] = {"type": self.kind, **self._params()}
        if self.answer_key != "answer":
            data["answer_key"] = self.answer_key
        if self.reasoning_key != "reasoning":
            data["reasoning_key"] = self.reasoning_key
        return data

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> JudgeResponseFormat:
        """The format ``to_dict`` described, of the class its ``type`` names (same as
        ``format_from_dict``)."""
        return format_from_dict(data)


class DiscreteJudgeResponseFormat(JudgeResponseFormat):
    """The answer is one of a fixed list of numeric options, each with a meaning."""

    kind = "discrete"

    def __init__(self, options: Mapping[float, str] | Sequence[float], **keys: str) -> None:
        super().__init__(**keys)
        if isinstance(options, Mapping):
            items = [(_as_number("options", k), str(v)) for k, v in options.items()]
        else:
            items = [(_as_number("options", k), "") for k in options]
        if not items:
            raise ValueError(f"{type(self).__name__} needs at least one option")
        self.options: dict[float, str] = dict(items)
        """Each allowed answer value and what it means."""

    def describe_answer(self) -> str:
        parts = [f"{v!r}" + (f" ({m})" if m else "") for v, m in self.options.items()]
        return "exactly one of " + ", ".join(parts) + "."

    def validate_answer(self, value: Any) -> float:
        number = _as_number(self.answer_key, value)
        for option in self.options:
            if math.isclose(number, option, rel_tol=0.0, abs_tol=1e-9):
                return option
        allowed = ", ".join(repr(o) for o in self.options)
        raise JudgeFormatError(f"answer {value!r} is not one of the options ({allowed})")

    def answer_schema(self) -> dict[str, Any]:
        return {"type": "number", "enum": list(self.options)}

    def _params(self) -> dict[str, Any]:
        return {"options": [{"value": v, "meaning": m} for v, m in self.options.items()]}


class BinaryJudgeResponseFormat(DiscreteJudgeResponseFormat):
    """Yes or no: 1.0 when the requirement is satisfied, 0.0 when it is not."""

    kind = "binary"

    def __init__(
        self, yes: str = "yes, the requirement is satisfied", no: str = "no, it is not", **keys: str
    ):
        super().__init__({1.0: yes, 0.0: no}, **keys)

    def _params(self) -> dict[str, Any]:
        return {"yes": self.options[1.0], "no": self.options[0.0]}


class ContinuousJudgeResponseFormat(JudgeResponseFormat):
    """Any number inside ``[low, high]`` (inclusive)."""

    kind = "continuous"

    def __init__(self, low: float = 0.0, high: float = 1.0, meaning: str = "", **keys: str) -> None:
        super().__init__(**keys)
        self.low = _as_number("low", low)
        """Smallest allowed answer."""
        self.high = _as_number("high", high)
        """Largest allowed answer."""
        self.meaning = meaning
        """What the scale measures (shown to the judge)."""
        if self.low >= self.high:
            raise ValueError(f"continuous format needs low < high, got [{low}, {high}]")

    def describe_answer(self) -> str:
        suffix = f" ({self.meaning})" if self.meaning else ""
        return f"a number from {self.low:g} to {self.high:g} inclusive, any value in between allowed{suffix}."

    def validate_answer(self, value: Any) -> float:
        number = _as_number(self.answer_key, value)
        if not self.low <= number <= self.high:
            raise JudgeFormatError(f"answer {value!r} is out of range [{self.low:g}, {self.high:g}]")
        return number

    def answer_schema(self) -> dict[str, Any]:
        return {"type": "number", "minimum": self.low, "maximum": self.high}

    def _params(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "meaning": self.meaning}


class UnitVectorJudgeResponseFormat(JudgeResponseFormat):
    """A probability vector over named labels: one number in [0, 1] per label, summing to 1."""

    kind = "unit_vector"
    tolerance: ClassVar[float] = 1e-3
    """How far the sum may stray from 1."""

    def __init__(self, labels: Sequence[str], **keys: str) -> None:
        super().__init__(**keys)
        self.labels = [str(label) for label in labels]
        """The label of each position of the vector."""
        if len(self.labels) < 2:
            raise ValueError("unit_vector format needs at least two labels")

    def describe_answer(self) -> str:
        return (
            f"a list of {len(self.labels)} numbers, one per label in the order "
            f"{', '.join(self.labels)}; each from 0 to 1 and all summing to 1."
        )

    def validate_answer(self, value: Any) -> list[float]:
        if not isinstance(value, list):
            raise JudgeFormatError(f"answer must be a list of {len(self.labels)} numbers, got {value!r}")
        if len(value) != len(self.labels):
            raise JudgeFormatError(f"answer has {len(value)} entries; expected {len(self.labels)}")
        numbers = [_as_number(self.answer_key, v) for v in value]
        if any(not 0.0 <= n <= 1.0 for n in numbers):
            raise JudgeFormatError(f"answer {value!r} is out of range: every entry must lie in [0, 1]")
        if abs(math.fsum(numbers) - 1.0) > self.tolerance:
            raise JudgeFormatError(f"answer {value!r} sums to {math.fsum(numbers):g}, not 1")
        return numbers

    def answer_schema(self) -> dict[str, Any]:
        n = len(self.labels)
        item = {"type": "number", "minimum": 0.0, "maximum": 1.0}
        return {"type": "array", "items": item, "minItems": n, "maxItems": n}

    def _params(self) -> dict[str, Any]:
        return {"labels": list(self.labels)}


FORMAT_TYPES: dict[str, type[JudgeResponseFormat]] = {
    cls.kind: cls
    for cls in (
        BinaryJudgeResponseFormat,
        DiscreteJudgeResponseFormat,
        ContinuousJudgeResponseFormat,
        UnitVectorJudgeResponseFormat,
    )
}
"""Format classes by their ``type`` name."""


def format_from_dict(data: Mapping[str, Any]) -> JudgeResponseFormat:
    """Rebuild a format from ``to_dict`` output; unknown types and fields are rejected by name."""
    if not isinstance(data, Mapping) or "type" not in data:
        raise ValueError(f"a judge response format needs a 'type' ({', '.join(FORMAT_TYPES)}); got {data!r}")
    kind = data["type"]
    if kind not in FORMAT_TYPES:
        raise ValueError(f"unknown judge response format type {kind!r}; known: {', '.join(FORMAT_TYPES)}")
    params = {k: v for k, v in data.items() if k != "type"}
    if kind == "discrete" and isinstance(params.get("options"), list):
        opts = params["options"]
        if all(isinstance(o, Mapping) for o in opts):
            params["options"] = {o["value"]: o.get("meaning", "") for o in opts}
    try:
        return FORMAT_TYPES[kind](**params)
    except TypeError as exc:
        raise ValueError(f"judge response format {kind!r}: {exc}") from exc


binary_judge_response_format = BinaryJudgeResponseFormat()
"""The default yes/no format of requirement judges: answer 1.0 or 0.0."""

continuous_judge_response_format = ContinuousJudgeResponseFormat()
"""Any number in [0, 1]."""
