"""Saving a rubric without losing its author's comments and layout: the file is edited in place.

The app edits plain data (``envs.gui.document``); the file it came from has comments, blank lines,
hand-wrapped phrase lists and its own quoting, none of which plain data holds. So a save does not re-dump
the document: it compares the document with the one the file was loaded as, and rewrites only the text of
what changed (``envs.gui.splice``), so every other byte stays as written: an unchanged item of a changed
phrase list keeps its quoting and its line, a changed folded question keeps the lines whose words stay, a
new requirement or key is appended in the style of its siblings.

ruamel.yaml's round-trip mode would keep comments too, but it re-flows every flow list and breaks long
quoted strings even where nothing changed. Every plan is checked: the text is loaded back through the
library and must give the document; when it does not, the save falls back to a plain re-dump and
``SavePlan.note`` says so. A JSON file is written as JSON from scratch (it has no comments to keep).
``SavePlan.lost_comments`` lists the comment lines a save drops (those on the lines of a deleted requirement
or phrase, or all of them on a re-dump), so the app can say so before it overwrites.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import yaml

from envs.gui.document import Doc, to_yaml
from envs.gui.splice import Unsupported, splice
from rubrics.multistep.rubric_io import RubricFileError, rubric_from_dict, rubric_to_dict


@dataclass(frozen=True)
class SavePlan:
    """What a save would write, and what it would lose."""

    text: str
    """The file's new content."""
    in_place: bool
    """True: the source file edited in place (comments and layout kept); False: a plain re-dump."""
    lost_comments: list[str] = field(default_factory=list)
    """Comment lines of the source that ``text`` no longer has."""
    note: str = ""
    """Why the save is a re-dump, when it is one of a file that had text."""


def plan_save(doc: Doc, source_text: str | None, source_doc: Doc | None) -> SavePlan:
    """The text to save ``doc`` as: ``source_text`` (loaded as ``source_doc``) with the changes spliced in,
    or a re-dump when there is no source or the splice does not load back as ``doc``."""
    dumped = to_yaml(doc)
    if not source_text or source_doc is None:
        return SavePlan(dumped, in_place=False)
    if _is_json(source_text):  # JSON has no comments to keep, and a YAML splice would leave it JSON no more
        return SavePlan(to_json(doc), False, note="the file is JSON: written as JSON from scratch")
    try:
        meaning: Any = _meaning(doc)
    except (RubricFileError, ValueError):
        meaning = None  # an invalid document is never written: the text is only a preview
    try:
        text = splice(source_text, source_doc, doc)
        if meaning is not None and _meaning(yaml.safe_load(text)) != meaning:
            raise Unsupported("the edited text does not load back as the document")
    except (Unsupported, yaml.YAMLError, RubricFileError, ValueError) as exc:
        return SavePlan(dumped, False, lost_comments(source_text, dumped), note=f"re-dumped: {exc}")
    return SavePlan(text, True, lost_comments(source_text, text))


def to_json(doc: Doc) -> str:
    """The document as JSON (answer keys become strings, which the library reads back as numbers)."""
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _is_json(text: str) -> bool:
    if not text.lstrip().startswith("{"):
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _meaning(data: Any) -> Any:
    """What the library makes of ``data`` (so equal meanings compare equal whatever the spelling)."""
    return rubric_to_dict(rubric_from_dict(copy.deepcopy(data), "rubric"))


_COMMENT = re.compile(r"(?:^|\s)(#.*)$")


def comment_lines(text: str) -> list[str]:
    """The comments of a YAML text, one per line that has one (a ``#`` outside quotes after a blank)."""
    out = []
    for line in text.splitlines():
        found = _COMMENT.search(line)
        if (
            found
            and line[: found.start(1)].count('"') % 2 == 0
            and line[: found.start(1)].count("'") % 2 == 0
        ):
            out.append(found.group(1).strip())
    return out


def lost_comments(before: str, after: str) -> list[str]:
    """Comments of ``before`` that ``after`` does not have (as many times as they are missing)."""
    missing = Counter(comment_lines(before)) - Counter(comment_lines(after))
    out = []
    for comment in comment_lines(before):
        if missing[comment] > 0:
            out.append(comment)
            missing[comment] -= 1
    return out
