"""Splicing edits into a YAML text: a phrase list is edited item by item, so unchanged items keep their
text, quoting, line and comments; a folded question keeps the lines whose words stay."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from envs.gui.splice import Unsupported, splice

FLOW = """\
rules:
  any: [safe, "scene is safe",   # canonical
        'safe to enter', all clear]
"""

BLOCK = """\
labels:
  - fire   # the usual one
  - "gas leak"
  - flood
"""


def edited(source: str, change: Any) -> str:
    """``source`` spliced with the data ``change`` makes of it, checked to load back as that data."""
    old = yaml.safe_load(source)
    new = yaml.safe_load(source)
    change(new)
    text = splice(source, old, new)
    assert yaml.safe_load(text) == new
    return text


def test_a_replaced_phrase_takes_the_quoting_of_the_one_it_replaces() -> None:
    def change(d: dict[str, Any]) -> None:
        d["rules"]["any"][2] = "fine to enter"
        d["rules"]["any"][3] = "no hazards"

    # single-quoted stays single-quoted; plain stays plain where YAML reads it back as the same string
    assert edited(FLOW, change) == FLOW.replace("'safe to enter', all clear", "'fine to enter', no hazards")


def test_a_plain_neighbour_gives_a_plain_phrase_unless_it_would_read_back_differently() -> None:
    def change(d: dict[str, Any]) -> None:
        d["rules"]["any"][3:] = ["all clear", "yes", "a: b"]

    # "yes" unquoted is a boolean and "a: b" a mapping: both are double-quoted
    assert edited(FLOW, change) == FLOW.replace("all clear]", 'all clear, "yes", "a: b"]')


def test_deleting_a_phrase_removes_its_separator_and_keeps_the_other_lines() -> None:
    def drop_first(d: dict[str, Any]) -> None:
        del d["rules"]["any"][0]

    assert edited(FLOW, drop_first) == FLOW.replace('[safe, "scene', '["scene')

    def drop_last(d: dict[str, Any]) -> None:
        del d["rules"]["any"][-1]

    assert edited(FLOW, drop_last) == FLOW.replace("'safe to enter', all clear]", "'safe to enter']")

    def drop_the_second_line_s_first(d: dict[str, Any]) -> None:
        del d["rules"]["any"][2]

    # from the item to the next one: the line break before it stays, the comment above it too
    assert edited(FLOW, drop_the_second_line_s_first) == FLOW.replace("'safe to enter', all", "all")


def test_new_phrases_wrap_at_the_authors_width_aligned_with_the_first_item() -> None:
    source = (
        "any: [" + ", ".join(f"phrase{i:02d}" for i in range(10)) + "]\n"
    )  # 6 + 10 * 10 - 2 + 1 = 105 chars

    def change(d: dict[str, Any]) -> None:
        d["any"].append("one more")

    # the file's width is its one long line's, 105; 105 + len(", one more") = 115 > 105: a new line, the
    # item at column 6 under the first one
    assert edited(source, change) == source.replace("phrase09]", "phrase09,\n      one more]")


def test_a_block_list_is_edited_line_by_line() -> None:
    def change(d: dict[str, Any]) -> None:
        d["labels"] = ["fire", "gas leak", "chemical spill", "flood", "storm"]

    expected = BLOCK.replace('  - "gas leak"\n', '  - "gas leak"\n  - "chemical spill"\n') + "  - storm\n"
    assert edited(BLOCK, change) == expected

    def delete(d: dict[str, Any]) -> None:
        del d["labels"][1]

    assert edited(BLOCK, delete) == BLOCK.replace('  - "gas leak"\n', "")


def test_a_folded_question_keeps_the_lines_whose_words_stay() -> None:
    source = """\
q: >-
  one two three four five
  six seven eight nine ten
  eleven twelve thirteen
"""

    def middle(d: dict[str, Any]) -> None:
        d["q"] = d["q"].replace("seven eight", "seven and a half, eight")

    # the block's width is its widest line (2 + 24 = 26): the middle line's words re-wrapped at 24
    assert edited(source, middle) == source.replace(
        "  six seven eight nine ten\n", "  six seven and a half,\n  eight nine ten\n"
    )

    def appended(d: dict[str, Any]) -> None:
        d["q"] += " fourteen"

    # appended words flow onto the last line while they fit ("eleven twelve thirteen fourteen" is 31 > 24)
    assert edited(source, appended) == source + "  fourteen\n"
    # "eleven twelve thirteen x" is 24: it fits
    assert edited(source, lambda d: d.update(q=d["q"] + " x")) == source.replace("thirteen", "thirteen x")


def test_a_change_it_cannot_place_is_refused() -> None:
    with pytest.raises(Unsupported, match="empty"):
        splice("", None, {"a": 1})
