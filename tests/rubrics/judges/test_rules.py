"""Rule judges: keywords as whole words in every mode, regexes and negation, callables sync and async."""

from __future__ import annotations

from typing import Any

import pytest

from rubrics.judges import (
    CallableJudge,
    ContinuousJudgeResponseFormat,
    JudgeResponse,
    KeywordJudge,
    RegexJudge,
)

# -- rule judges ----------------------------------------------------------------------------------------


async def test_keyword_judge_matches_whole_words_case_insensitively() -> None:
    ems = KeywordJudge(["EMS"], mode="any")
    assert (await ems("p", "Call EMS now.")).answer == 1.0
    assert (await ems("p", "call ems now")).answer == 1.0
    assert (
        await ems("p", "Pack the items and systems.")
    ).answer == 0.0  # whole words only (docs/architecture.md: rule judges match whole words)
    phrase = KeywordJudge(["scene safety"], mode="all")
    assert (await phrase("p", [{"role": "assistant", "content": "Check Scene\nSafety first"}])).answer == 1.0


@pytest.mark.parametrize(
    ("mode", "text", "expected"),
    [
        ("all", "airway and breathing", 1.0),
        ("all", "airway only", 0.0),
        ("any", "breathing only", 1.0),
        ("any", "neither", 0.0),
        ("none", "neither", 1.0),
        ("none", "the airway", 0.0),
    ],
)
async def test_keyword_modes(mode: Any, text: str, expected: float) -> None:
    assert (await KeywordJudge(["airway", "breathing"], mode=mode)("p", text)).answer == expected


async def test_regex_judge_and_negation() -> None:
    assert (await RegexJudge(r"\b\d+\s*mg\b")("p", "Give 300 mg.")).answer == 1.0
    assert (await RegexJudge(r"\bguess\b", negate=True)("p", "I guess so")).answer == 0.0


async def test_callable_judge_sync_async_and_checked_answers() -> None:
    def exact(completion: str, answer: str) -> bool:
        return completion.strip() == answer

    async def partial(completion: str) -> tuple[float, str]:
        return 0.5, "half"

    assert (await CallableJudge(exact)("p", " 42 ", "42")).answer == 1.0
    continuous = CallableJudge(partial, response_format=ContinuousJudgeResponseFormat(0, 1))
    assert await continuous("p", "x") == JudgeResponse(0.5, "half")
    with pytest.raises(Exception, match="not one of the options"):
        await CallableJudge(partial)("p", "x")  # 0.5 is not binary
