"""Judge response formats: exact instructions, strict parsing, recovery of wrapped JSON, dict round trips."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from rubrics.judges import (
    BinaryJudgeResponseFormat,
    ContinuousJudgeResponseFormat,
    DiscreteJudgeResponseFormat,
    JudgeFormatError,
    JudgeResponse,
    JudgeResponseFormat,
    UnitVectorJudgeResponseFormat,
    binary_judge_response_format,
    extract_json_object,
    format_from_dict,
)

ALL_FORMATS = [
    BinaryJudgeResponseFormat(),
    DiscreteJudgeResponseFormat({0.0: "wrong", 0.5: "partly right", 1.0: "right"}),
    ContinuousJudgeResponseFormat(0.0, 1.0, meaning="how complete the answer is"),
    ContinuousJudgeResponseFormat(-5.0, 5.0),
    UnitVectorJudgeResponseFormat(["safe", "unsafe", "unclear"]),
]


def test_the_binary_format_example() -> None:
    # the binary judge-format example, with the import path this project uses
    first_line = str(binary_judge_response_format).split("\n")[0]
    assert "JSON" in first_line and '"answer"' in first_line and '"reasoning"' in first_line

    good = '{"answer": 1.0, "reasoning": "Responder confirmed safety."}'
    assert binary_judge_response_format.convert(good) == JudgeResponse(
        answer=1.0, reasoning="Responder confirmed safety."
    )

    bad = '{"answer": 2.0, "reasoning": "Not allowed"}'
    with pytest.raises(JudgeFormatError, match=r"not one of the options \(1\.0, 0\.0\)"):
        binary_judge_response_format.convert(bad)


def test_instruction_is_exact_and_lists_options() -> None:
    text = str(BinaryJudgeResponseFormat())
    assert text == (
        'Respond with only a JSON object of the form {"reasoning": "<your reasoning>", "answer": "<answer>"}.\n'
        '"reasoning": a short explanation of your verdict, written first.\n'
        '"answer": exactly one of 1.0 (yes, the requirement is satisfied), 0.0 (no, it is not).'
    )
    assert "from -5 to 5 inclusive" in str(ContinuousJudgeResponseFormat(-5, 5))
    assert "safe, unsafe, unclear" in str(UnitVectorJudgeResponseFormat(["safe", "unsafe", "unclear"]))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("yes, it is fine", "not JSON"),
        ('{"answer": 1.0, "reas', "not JSON"),
        ('{"reasoning": "no answer key"}', "missing key 'answer'"),
        ('{"answer": "maybe", "reasoning": ""}', "must be a number"),
        ('{"answer": 0.5, "reasoning": ""}', "not one of the options"),
        ('{"answer": null, "reasoning": ""}', "must be a number"),
        ("[1.0]", "not JSON"),
    ],
)
def test_binary_errors_say_what_was_wrong(text: str, message: str) -> None:
    with pytest.raises(JudgeFormatError, match=message):
        binary_judge_response_format.convert(text)


def test_continuous_accepts_any_value_inside_the_range() -> None:
    fmt = ContinuousJudgeResponseFormat(0.0, 1.0)
    for value in (0.0, 0.25, 0.7, 1.0):
        assert fmt.convert(json.dumps({"answer": value, "reasoning": "r"})).answer == value
    for value in (-0.01, 1.5):
        with pytest.raises(JudgeFormatError, match="out of range"):
            fmt.convert(json.dumps({"answer": value, "reasoning": "r"}))


def test_discrete_matches_options_and_rejects_others() -> None:
    fmt = DiscreteJudgeResponseFormat({0.0: "wrong", 0.5: "partly", 1.0: "right"})
    assert fmt.convert('{"answer": 0.5, "reasoning": ""}').answer == 0.5
    assert fmt.convert('{"answer": "1", "reasoning": ""}').answer == 1.0  # a numeric string is a number
    with pytest.raises(JudgeFormatError, match="not one of the options"):
        fmt.convert('{"answer": 0.75, "reasoning": ""}')


def test_unit_vector_checks_length_range_and_sum() -> None:
    fmt = UnitVectorJudgeResponseFormat(["a", "b", "c"])
    assert fmt.convert('{"answer": [0.2, 0.3, 0.5], "reasoning": "x"}').answer == [0.2, 0.3, 0.5]
    with pytest.raises(JudgeFormatError, match="expected 3"):
        fmt.convert('{"answer": [0.5, 0.5], "reasoning": "x"}')
    with pytest.raises(JudgeFormatError, match="sums to"):
        fmt.convert('{"answer": [0.5, 0.5, 0.5], "reasoning": "x"}')
    with pytest.raises(JudgeFormatError, match="out of range"):
        fmt.convert('{"answer": [1.5, -0.5, 0.0], "reasoning": "x"}')
    with pytest.raises(JudgeFormatError, match="list"):
        fmt.convert('{"answer": 1.0, "reasoning": "x"}')


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"answer": 1.0, "reasoning": "fenced"}\n```',
        'Sure! Here is my verdict:\n```\n{"answer": 1.0, "reasoning": "fenced"}\n```\nHope it helps.',
        'My verdict is {"answer": 1.0, "reasoning": "fenced"} as requested.',
        '  {"answer": 1.0, "reasoning": "fenced"}  ',
    ],
)
def test_wrapped_json_is_recovered(text: str) -> None:
    assert binary_judge_response_format.convert(text) == JudgeResponse(1.0, "fenced")


def test_extract_skips_braces_that_are_not_json() -> None:
    assert extract_json_object('I use {curly} braces. {"answer": 0.0}') == {"answer": 0.0}


@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=lambda f: f.kind)
def test_round_trip_through_plain_dicts_and_yaml_keeps_the_type(fmt: object) -> None:
    data = fmt.to_dict()  # type: ignore[attr-defined]
    again = format_from_dict(yaml.safe_load(yaml.safe_dump(data)))
    assert type(again) is type(fmt)
    assert again == fmt
    assert str(again) == str(fmt)
    assert type(JudgeResponseFormat.from_dict(data)) is type(fmt)


def test_round_trip_keeps_custom_keys() -> None:
    fmt = ContinuousJudgeResponseFormat(0, 10, answer_key="score", reasoning_key="why")
    again = format_from_dict(fmt.to_dict())
    assert again.convert('{"score": 7, "why": "ok"}') == JudgeResponse(7.0, "ok")


def test_from_dict_rejects_unknown_type_and_fields() -> None:
    with pytest.raises(ValueError, match="unknown judge response format type 'vector'"):
        format_from_dict({"type": "vector"})
    with pytest.raises(ValueError, match="continuous"):
        format_from_dict({"type": "continuous", "lo": 0})
    with pytest.raises(ValueError, match="needs a 'type'"):
        format_from_dict({"low": 0})


def test_json_schema_describes_the_answer() -> None:
    schema = ContinuousJudgeResponseFormat(0, 1).json_schema()
    assert schema["properties"]["answer"] == {"type": "number", "minimum": 0.0, "maximum": 1.0}
    assert schema["required"] == ["reasoning", "answer"]
    assert BinaryJudgeResponseFormat().json_schema()["properties"]["answer"]["enum"] == [1.0, 0.0]


@given(st.floats(min_value=0.0, max_value=1.0, allow_nan=False))
def test_continuous_accepts_every_value_in_range(value: float) -> None:
    fmt = ContinuousJudgeResponseFormat(0.0, 1.0)
    assert fmt.convert(json.dumps({"answer": value, "reasoning": ""})).answer == value


@given(st.floats(allow_nan=False, allow_infinity=False).filter(lambda v: min(abs(v), abs(v - 1.0)) > 1e-6))
def test_binary_rejects_every_other_number(value: float) -> None:
    # options match within 1e-9 (float noise); anything farther away is rejected
    with pytest.raises(JudgeFormatError):
        binary_judge_response_format.convert(json.dumps({"answer": value, "reasoning": ""}))
