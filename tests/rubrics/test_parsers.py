"""Parser, XMLParser and ThinkParser."""

from __future__ import annotations

import pytest

from rubrics import Parser, ThinkParser, XMLParser


def test_parser_reads_strings_and_the_last_assistant_message() -> None:
    parser = Parser()
    assert parser.parse_answer("42") == "42"
    messages = [
        {"role": "assistant", "content": "first"},
        {"role": "user", "content": "again?"},
        {"role": "assistant", "content": "second"},
        {"role": "user", "content": "thanks"},
    ]
    assert parser.parse_answer(messages) == "second"
    assert parser.parse_answer([{"role": "user", "content": "only user"}]) is None
    assert Parser(extract_fn=str.upper).parse_answer("abc") == "ABC"
    assert parser.get_format_reward_func()(completion="anything") == 1.0


def test_xml_parser_parse_format_and_answer() -> None:
    parser = XMLParser(["think", ("answer", "code")])
    text = "<think>\n  add them \n</think>\n<answer>4</answer>"
    parsed = parser.parse(text)
    assert parsed.think == "add them" and parsed.answer == "4" and parsed.code is None
    assert parser.parse(text, strip=False).think == "add them"  # the tag pattern eats outer whitespace
    assert parser.fields == ["think", "answer"]
    formatted = parser.format(think="because", answer="7")
    assert formatted == "<think>\nbecause\n</think>\n<answer>\n7\n</answer>"
    assert parser.parse(formatted).answer == "7"
    assert parser.format(think="t", code="print(1)").endswith("<code>\nprint(1)\n</code>")
    with pytest.raises(ValueError, match="missing field 'answer'"):
        parser.format(think="only")
    assert "<think>" in parser.get_format_str() and "<answer | code>" in parser.get_format_str()


def test_xml_parser_answer_comes_from_the_latest_message_that_has_one() -> None:
    parser = XMLParser(["think", "answer"])
    messages = [
        {"role": "assistant", "content": "<answer>3</answer>"},
        {"role": "user", "content": "sure?"},
        {"role": "assistant", "content": "<think>yes</think> no answer tag here"},
    ]
    assert parser.parse_answer(messages) == "3"
    assert parser.parse_answer("no tags") is None


def test_xml_format_reward() -> None:
    reward = XMLParser(["think", "answer"]).get_format_reward_func()
    assert reward(completion="<think>a</think><answer>b</answer>") == 1.0
    assert reward(completion="<answer>b</answer><think>a</think>") == 0.0  # wrong order
    assert reward(completion="<think>a</think><answer>b</answer><answer>c</answer>") == 0.0  # twice
    messages = [
        {"role": "assistant", "content": "<think>a</think><answer>b</answer>"},
        {"role": "assistant", "content": "plain"},
    ]
    assert reward(completion=messages) == 0.5


def test_xml_parser_rejects_bad_fields() -> None:
    with pytest.raises(ValueError, match="at least one field"):
        XMLParser([])
    with pytest.raises(ValueError, match="not a tag name"):
        XMLParser(["good", "bad tag"])
    with pytest.raises(ValueError, match="appears twice"):
        XMLParser(["a", ("b", "a")])


def test_think_parser() -> None:
    parser = ThinkParser()
    assert parser.parse("<think>hmm</think>\n  Paris ") == "Paris"
    assert parser.parse("no reasoning at all") == "no reasoning at all"
    assert parser.parse("<think>still thinking") is None
    assert (
        ThinkParser(extract_fn=str.lower).parse_answer(
            [{"role": "assistant", "content": "<think>x</think>OK"}]
        )
        == "ok"
    )
    reward = parser.get_format_reward_func()
    assert reward(completion="<think>why</think> because") == 1.0
    assert reward(completion="<think>why</think>") == 0.0  # no answer after the block
    assert reward(completion="because <think>why</think> x") == 0.0  # block not first
    assert reward(completion="<think>a</think><think>b</think> x") == 0.0
