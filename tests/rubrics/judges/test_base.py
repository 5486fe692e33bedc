"""The judge protocol: every kind of judge satisfies it."""

from __future__ import annotations

from rubrics.judges import (
    CallableJudge,
    Judge,
    KeywordJudge,
    LLMJudgeClient,
    RegexJudge,
)

from .conftest import judge_of


async def test_every_judge_satisfies_the_protocol(client: LLMJudgeClient) -> None:
    judges = [judge_of(client), RegexJudge("x"), KeywordJudge(["x"]), CallableJudge(lambda: True)]
    assert all(isinstance(j, Judge) for j in judges)
