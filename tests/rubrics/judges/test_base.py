"""The judge protocol: every kind of judge satisfies it, requirement judges included, and reward-function
judges and requirement rules share one matcher."""

from __future__ import annotations

import pytest

from rubrics.judges import (
    CallableJudge,
    Judge,
    KeywordJudge,
    LLMJudgeClient,
    RegexJudge,
    binary_judge_response_format,
)
from rubrics.judges.endpoint import JudgeEndpoint
from rubrics.judges.matching import asserted, rule_matches
from rubrics.judges.rules import RulesJudge
from rubrics.multistep import BinaryRequirement, LLMRequirementJudge, RuleRequirementJudge

from .conftest import judge_of


async def test_every_judge_satisfies_the_protocol(client: LLMJudgeClient) -> None:
    judges = [judge_of(client), RegexJudge("x"), KeywordJudge(["x"]), CallableJudge(lambda: True)]
    assert all(isinstance(j, Judge) for j in judges)


async def test_requirement_judges_give_the_same_judge_concept() -> None:
    """A rubric file's judges give a ``Judge`` per requirement: the protocol reward functions use."""
    rules = {1.0: {"regex": r"\b\d+\s*mg\b"}, 0.0: {"any": ["no dose"]}}
    req = BinaryRequirement(name="dose", question="Dose given?", rules=rules)
    llm = LLMRequirementJudge("llm", JudgeEndpoint(base_url="http://127.0.0.1:1/v1", model="judge"))
    for judge in (RuleRequirementJudge().judge_for(req), llm.judge_for(req)):
        assert isinstance(judge, Judge) and judge.name == "dose"
        assert judge.response_format == req.response_format
    by_rules = RuleRequirementJudge().judge_for(req)
    assert isinstance(by_rules, RulesJudge)
    assert (await by_rules("p", "Give 300 mg.", {"answer": 1.0})).answer == 1.0
    assert (await by_rules("p", "There was no dose.")).answer == 0.0
    assert (await by_rules("p", "I wait.")).answer is None  # no rule matched: no answer, never correct


@pytest.mark.parametrize(
    "text", ["Give 300 mg.", "give 300MG now", "300 mgs", "Pack the items", "EMS", "items"]
)
async def test_reward_and_requirement_rules_match_alike(text: str) -> None:
    """One matcher: a regex judge and a requirement's regex rule, a keyword judge and a requirement's
    phrase rule (negation and inflections off) give the same verdict on the same reply."""
    regex, keyword = r"\b\d+\s*mg\b", "ems"
    rules = {1.0: {"regex": regex}}
    as_requirement = (await RulesJudge(rules, binary_judge_response_format)("p", text)).answer == 1.0
    assert as_requirement == ((await RegexJudge(regex)("p", text)).answer == 1.0)
    as_written = {"any": [keyword], "negation_aware": False}
    said = (await KeywordJudge([keyword], mode="any")("p", text)).answer == 1.0
    assert said == asserted(keyword, text, negation=False, inflect=False)
    assert said == rule_matches(as_written, text)  # "ems" inflects to ems/emses/emsed/emsing: never "items"
