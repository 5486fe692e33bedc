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
    assert parser.fields == parser.get_fields() == ["think", "answer"]
    formatted = parser.format(think="because", answer="7")
    assert formatted == "<think>\nbecause\n</think>\n<answer>\n7\n</answer>"
    assert parser.parse(formatted).answer == "7"
    with pytest.raises(ValueError, match="missing field 'answer' \\(any of answer, code\\)"):
        parser.format(think="only")
    assert "<think>" in parser.get_format_str() and "<answer | code>" in parser.get_format_str()


def test_xml_alternatives_parse_under_either_name_and_format_under_the_first() -> None:
    parser = XMLParser(["reasoning", ("code", "answer")], answer_field="code")
    parsed = parser.parse("<reasoning>r</reasoning><answer>x = 1</answer>")
    assert (parsed.code, parsed.answer) == (None, "x = 1")  # each name is its own attribute
    assert parser.parse("<code>y</code>").code == "y"
    # a value given under an alternative is written under the canonical tag; the canonical name wins
    assert (
        parser.format(reasoning="r", answer="x = 1") == "<reasoning>\nr\n</reasoning>\n<code>\nx = 1\n</code>"
    )
    assert parser.format(reasoning="r", code="c", answer="a").endswith("<code>\nc\n</code>")


def test_xml_parser_answer_comes_from_the_latest_message_that_has_one() -> None:
    parser = XMLParser(["think", "answer"])
    messages = [
        {"role": "assistant", "content": "<answer>3</answer>"},
        {"role": "user", "content": "sure?"},
        {"role": "assistant", "content": "<think>yes</think> no answer tag here"},
    ]
    assert parser.parse_answer(messages) == "3"
    assert parser.parse_answer("no tags") is None
    # in one string the last answer counts (a model that corrects itself); parse reads the first by default
    text = "<answer>41</answer> wait, <answer>42</answer>"
    assert parser.parse_answer(text) == "42"
    assert (parser.parse(text).answer, parser.parse(text, last=True).answer) == ("41", "42")


def test_messages_by_role() -> None:
    parser = Parser()
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a1"},
        {"role": "tool", "content": "t"},
        {"role": "assistant", "content": "a2"},
    ]
    assert [m["content"] for m in parser.get_assistant_messages(messages)] == ["a1", "a2"]
    assert [m["content"] for m in parser.get_user_messages(messages)] == ["u"]
    assert [m["content"] for m in parser.get_system_messages(messages)] == ["s"]
    assert [m["content"] for m in parser.get_tool_messages(messages)] == ["t"]
    assert parser.get_assistant_messages("plain") == [{"role": "assistant", "content": "plain"}]
    assert parser.get_user_messages("plain") == [] and parser.get_assistant_messages(None) == []


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("<think>a</think><answer>b</answer>", 1.0),  # 0.4 + 0.2 + 0.2 + 0.2
        ("  <think>a</think>\n<answer>b</answer>\n", 1.0),  # outer whitespace does not matter
        ("<think>a</think>", 0.6),  # 0.4 * 1/2 + well formed 0.2 + starts with <think> 0.2
        ("<answer>b</answer>", 0.6),  # 0.4 * 1/2 + 0.2 + ends with </answer> 0.2
        ("so <answer>b</answer>", 0.6),  # same: prose before does not cost the end bonus
        ("<answer>b</answer><think>a</think>", 0.4),  # both present, wrong order, neither bonus
        ("<think>a</think><answer>b</answer><answer>c</answer>", 0.8),  # answer twice: not well formed
        ("<think>a</think><answer>b", 0.4),  # answer never closed: 0.4 * 1/2 + starts 0.2
        ("plain text", 0.0),  # verifiers gives 0.2 here; see rubrics.parsers
    ],
)
def test_xml_format_reward_gives_partial_credit(reply: str, score: float) -> None:
    reward = XMLParser(["think", "answer"]).get_format_reward_func()
    assert reward(completion=reply) == pytest.approx(score)


def test_xml_format_reward_averages_assistant_messages() -> None:
    reward = XMLParser(["think", ("answer", "code")]).get_format_reward_func()
    messages = [
        {"role": "assistant", "content": "<think>a</think><code>b</code>"},  # 1.0 (an alternative)
        {"role": "user", "content": "plain"},  # not scored
        {"role": "assistant", "content": "plain"},  # 0.0
    ]
    assert reward(completion=messages) == pytest.approx(0.5)
    assert reward(completion=[{"role": "user", "content": "q"}]) == 0.0


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
    assert parser.parse("no reasoning at all") == "no reasoning at all"  # verifiers: "" (see the module)
    assert parser.parse("<think>a</think> one <think>b</think> two") == "two"  # after the last block
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
    messages = [
        {"role": "assistant", "content": "<think>a</think>yes"},
        {"role": "assistant", "content": "no thinking"},
        {"role": "assistant", "content": "<think>b</think>sure"},
    ]
    assert reward(completion=messages) == pytest.approx(2 / 3)
    assert reward(completion=[{"role": "user", "content": "q"}]) == 0.0  # nothing to score, not an error
