"""Per-prompt criteria datasets from local files, read into ``CriteriaExample``s (``docs/criteria_data.md``).

Three formats (``envs.criteria.formats``): the project's own (``native``: one ``CriteriaExample`` per
record), OpenAI's HealthBench (``healthbench``) and Scale AI's RaR-Medicine / RaR-Science (``rar``). Four
kinds of file (``envs.criteria.records``): JSONL, JSON (a list of records or ``{"data": [...]}``), parquet,
and a folder: one written by ``datasets`` (``save_to_disk``) or a downloaded dataset repository holding
JSONL, JSON or parquet files. Nothing is fetched from a hub.

A file is taken whole or refused whole: every record is converted, and if any is bad the error names the
first bad one (``FILE:LINE: field: reason``, ``FILE: [3].rubrics[0].points: reason`` in a JSON list,
``FILE: row 12: field: reason`` in parquet or a ``datasets`` folder, rows counted from 0 as
``dataset[12]`` counts them) and says how many records are bad in all. The field is the source format's
(``rubrics[0].points``), never the ``CriteriaExample`` field it becomes. Ids are unique across what one call
reads.

What is read but ignored is a warning, never an error, with the same file, line and field: a key that
HealthBench or RaR does not know inside a criterion (``FILE:1: rubrics[0].reviewer: unknown key, ignored
...``), a RaR ``rubric_count`` that disagrees with the criteria present (which are graded). Warnings go to
``warn`` (default: the log), and only for a file that is taken; past ``MAX_WARNINGS`` they are counted.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from envs.criteria.formats import FORMATS, convert, detect_format, in_source
from envs.criteria.records import Record, read_records
from rubrics.criteria.example import CriteriaExample
from rubrics.error_text import show
from rubrics.loading import FileLoadError, Place

logger = logging.getLogger(__name__)

MAX_WARNINGS = 20
"""The warnings given one by one per call; the rest are counted in one more."""

Warn = Callable[[FileLoadError], None]
"""What receives a warning: an error object naming the file, the line and the field, that is not raised."""


def load_criteria_examples(
    path: str | Path, format: str = "auto", split: str | None = None, warn: Warn | None = None
) -> list[CriteriaExample]:
    """Every example of a criteria dataset: a JSONL, JSON or parquet file, a folder written by ``datasets``,
    or a dataset repository folder (its ``data/`` when it has one).

    ``format``: one of ``FORMATS``, or ``auto`` to detect it from the first record (``detect_format``).
    ``split``: the split of a ``datasets`` folder (needed when it holds several), or, in a repository
    folder, the text that the files to read have in their path (``train`` reads ``data/train-*.parquet``);
    a single file ignores it. ``warn`` receives what was read but ignored (default: the log).

    Raises:
        FileLoadError: the first bad record (file, line or row, field, reason) and how many are bad; or a
            file or folder that cannot be read."""
    if format != "auto" and format not in FORMATS:
        raise ValueError(f"format must be 'auto' or one of {', '.join(FORMATS)}, got {format!r}")
    path = Path(path)
    records = read_records(path, split)
    head = _head(records, path, auto=format == "auto")
    fmt = format if format != "auto" else _detect(head)
    examples: list[CriteriaExample] = []
    tally = _Tally()
    first_of: dict[str, tuple[str, str]] = {}  # an id's first file and place (not its record: kept small)
    for record in itertools.chain(head, records):
        tally.records += 1
        try:
            example = _example(record, fmt, tally)
            if example.id in first_of:
                raise _duplicate(record, first_of[example.id], example.id, fmt)
        except FileLoadError as exc:
            tally.bad(exc)
            continue
        first_of[example.id] = (record.doc.file, record.place())
        examples.append(example)
    if tally.first_error is not None:
        first = tally.first_error
        bad = f"{tally.errors} of {tally.records} {fmt} records {'is' if tally.errors == 1 else 'are'} bad"
        whole = "the folder" if path.is_dir() else "the file"
        reason = f"{first.reason} ({bad}; {whole} is refused as a whole)"
        raise FileLoadError(first.file, reason, first.line, first.field)
    tally.give_warnings(warn or _log_warning)
    return examples


def _head(records: Iterator[Record], path: Path, auto: bool) -> list[Record]:
    """The first records, taken from ``records``: up to the first that parsed (``auto``: its format is the
    file's), else just the first.

    Raises:
        FileLoadError: there is none."""
    head: list[Record] = []
    for record in records:
        head.append(record)
        if not auto or record.broken is None:
            break
    if not head:
        raise FileLoadError(path, "holds no records (expected at least one example)")
    return head


@dataclass
class _Tally:
    """What a load counts beside its examples: the records, the bad ones (the first kept), and the warnings
    (the first ``MAX_WARNINGS`` kept with their records, the rest counted with their files)."""

    records: int = 0
    """Records read."""
    errors: int = 0
    """Bad records."""
    first_error: FileLoadError | None = None
    """The first bad record's error."""
    warnings: list[tuple[Record, Place, str]] = field(default_factory=list)
    """The first ``MAX_WARNINGS`` warnings: the record, the place in it, the reason."""
    more_warnings: int = 0
    """Warnings past those."""
    more_files: set[str] = field(default_factory=set)
    """The files of the warnings past those."""

    def bad(self, error: FileLoadError) -> None:
        """One more bad record."""
        self.errors += 1
        self.first_error = self.first_error or error

    def warn(self, record: Record, place: Place, reason: str) -> None:
        """One more warning."""
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append((record, place, reason))
        else:
            self.more_warnings += 1
            self.more_files.add(record.doc.file)

    def give_warnings(self, warn: Warn) -> None:
        """Each kept warning as an error at its place, one by one, then the count of the rest."""
        for record, place, reason in self.warnings:
            warn(record.error(place, reason))
        if self.more_warnings:
            warn(
                FileLoadError(
                    ", ".join(sorted(self.more_files)),
                    f"{self.more_warnings} more warning(s) like these, not shown",
                )
            )


def _log_warning(warning: FileLoadError) -> None:
    logger.warning("%s", warning)


def _detect(records: Sequence[Record]) -> str:
    """The format of the first record that parsed."""
    record = next((r for r in records if r.broken is None), records[0])
    if record.broken is not None:
        raise record.error((), record.broken)
    if not isinstance(record.data, Mapping):
        raise record.error((), f"wrong type (expected a mapping: one example, got {show(record.data)})")
    try:
        return detect_format(record.data, record.doc.file)
    except FileLoadError as exc:
        raise record.error((), exc.reason) from None


def _duplicate(record: Record, first: tuple[str, str], example_id: str, fmt: str) -> FileLoadError:
    """The error of ``record``, whose id ``first`` (a file and a place in it) already used."""
    key = {"native": "id", "healthbench": "prompt_id"}.get(fmt)
    if key is None:  # rar: the id the record wrote, or the one derived from its question
        key = next((k for k in ("id", "question_id") if k in record.data), "question")
    where = first[1] if first[0] == record.doc.file else f"{first[0]} {first[1]}"
    reason = f"the id {example_id!r} is used twice (first at {where})"
    if key == "question":
        reason = f"the same question as {where} (the id {example_id!r} is derived from the question)"
    return record.error((key,), reason)


def _example(record: Record, fmt: str, tally: _Tally) -> CriteriaExample:
    """``record`` as a ``CriteriaExample``, or the error of its first problem; what it holds that is read
    but ignored is a warning in ``tally``."""
    if record.broken is not None:
        raise record.error((), record.broken)
    data = record.data
    if not isinstance(data, Mapping):
        raise record.error((), f"wrong type (expected a mapping: one {fmt} record, got {show(data)})")
    converted = convert(data, fmt)
    try:
        example = CriteriaExample.model_validate(converted.fields)
    except ValidationError as exc:
        raise record.schema_error(in_source(exc, converted)) from None
    for place, reason in converted.warnings:
        tally.warn(record, place, reason)
    return example
