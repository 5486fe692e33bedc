"""Per-prompt criteria datasets from local files, read into ``CriteriaExample``s (``docs/criteria_data.md``).

Three formats: the project's own (``native``: one ``CriteriaExample`` per record), OpenAI's HealthBench
(``healthbench``) and Scale AI's RaR-Medicine / RaR-Science (``rar``). Four kinds of file: JSONL, JSON (a
list of records or ``{"data": [...]}``), parquet, and a folder: one written by ``datasets``
(``save_to_disk``) or a downloaded dataset repository holding JSONL, JSON or parquet files. Nothing is
fetched from a hub.

A file is taken whole or refused whole: every record is converted, and if any is bad the error names the
first bad one (``FILE:LINE: field: reason``, ``FILE: [3].rubrics[0].points: reason`` in a JSON list,
``FILE: row 12: field: reason`` in parquet or a ``datasets`` folder, rows counted from 0 as
``dataset[12]`` counts them) and says how many records are bad in all. The field is the source format's
(``rubrics[0].points``), never the ``CriteriaExample`` field it becomes. Ids are unique across what one call
reads.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rubrics.criteria_examples import CriteriaExample
from rubrics.loading import Document, FileLoadError, Place, parse_json, read_text, schema_error
from rubrics.messages import field_path, show

FORMATS = ("native", "healthbench", "rar")
"""The record formats ``load_criteria_examples`` reads (``auto`` detects one of them)."""

SUFFIXES = (".jsonl", ".json", ".parquet")
"""The data files read, alone or inside a dataset repository folder."""

_NEEDS = {
    "native": "'criteria' (with 'id' and 'prompt')",
    "healthbench": "'prompt' and 'rubrics' (with 'prompt_id')",
    "rar": "'question' and 'rubric' (with 'reference_answer')",
}
_METADATA = {"dataset_info.json", "dataset_infos.json", "dataset_dict.json", "state.json"}
"""JSON files of a dataset folder that describe the data rather than hold it."""


@dataclass(frozen=True)
class _Record:
    """One record as read, with the place that an error about it names."""

    doc: Document
    """The document holding the record: the record itself (JSONL, a row), or the whole JSON file."""
    where: Place = ()
    """The record's place in ``doc`` (``(3,)`` or ``("data", 3)`` in a JSON file)."""
    row: int | None = None
    """The row of a parquet file or ``datasets`` table, from 0."""
    broken: str | None = None
    """Why the line could not be parsed (the record is then None)."""

    @property
    def data(self) -> Any:
        data = self.doc.data
        for part in self.where:
            data = data[part]
        return data

    def place(self) -> str:
        """``line 3``, ``row 3`` or ``[3]``: where the record is in its file."""
        if self.row is not None:
            return f"row {self.row}"
        line = self.doc.line(self.where)
        return f"line {line}" if line is not None else field_path(self.where)

    def error(self, where: Sequence[Any], reason: str) -> FileLoadError:
        """An error at ``where`` inside the record."""
        return self._in_row(self.doc.error((*self.where, *where), reason, FileLoadError))

    def schema_error(self, exc: ValidationError) -> FileLoadError:
        """The first failure of ``exc`` (its locations already the source format's)."""
        return self._in_row(schema_error(exc, self.doc, self.where, CriteriaExample, FileLoadError))

    def _in_row(self, exc: FileLoadError) -> FileLoadError:
        if self.row is None:
            return exc
        where = f"row {self.row}: {exc.field}" if exc.field else f"row {self.row}"
        return FileLoadError(exc.file, exc.reason, exc.line, where)


# -- formats --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Converted:
    """A record in ``CriteriaExample``'s fields, and where each field came from (for error messages)."""

    fields: dict[str, Any]
    """The ``CriteriaExample`` fields."""
    top: dict[str, Place] = field(default_factory=dict)
    """A top-level field's place in the source record, where it differs (``id`` -> ``("prompt_id",)``)."""
    item: dict[str, str] = field(default_factory=dict)
    """A criterion field's key in the source's criterion, where it differs (``weight`` -> ``points``)."""

    def source(self, loc: Sequence[Any]) -> Place:
        """The place in the source record of ``loc``, a place in ``fields``."""
        if not loc:
            return ()
        head, *rest = loc
        if head == "criteria" and len(rest) >= 2 and isinstance(rest[0], int):
            rest[1] = self.item.get(rest[1], rest[1])
        return (*self.top.get(head, (head,)), *rest)


def detect_format(record: Mapping[str, Any], source: str) -> str:
    """The format of ``record``: ``native`` with ``criteria``, ``healthbench`` with ``rubrics`` and
    ``prompt``, ``rar`` with ``rubric`` and ``question``.

    Raises:
        FileLoadError: none fits; names ``source``, the keys found and the keys each format needs."""
    if "criteria" in record:
        return "native"
    if "rubrics" in record and "prompt" in record:
        return "healthbench"
    if "rubric" in record and "question" in record:
        return "rar"
    found = ", ".join(repr(str(key)) for key in record) or "none"
    needs = "; ".join(f"{name} needs {keys}" for name, keys in _NEEDS.items())
    raise FileLoadError(
        source,
        f"cannot tell the criteria format from the first record: its keys are {found} ({needs}); "
        f"name the format with env.format (--format) if it is one of {', '.join(FORMATS)}",
    )


def _native(record: Mapping[str, Any]) -> _Converted:
    return _Converted(dict(record))


def _healthbench(record: Mapping[str, Any]) -> _Converted:
    """HealthBench: ``prompt_id``, ``prompt``, ``rubrics: [{criterion, points, tags}]``, ``example_tags``;
    ``ideal_completions_data.ideal_completion`` is the reference answer; other keys are ignored."""
    fields = _present(record, id="prompt_id", prompt="prompt", criteria="rubrics", tags="example_tags")
    if isinstance(fields.get("criteria"), list):
        names = {"weight": "points", "requirement": "criterion", "tags": "tags"}
        fields["criteria"] = [_present(item, **names) for item in fields["criteria"]]
    ideal = record.get("ideal_completions_data")
    if isinstance(ideal, Mapping) and isinstance(ideal.get("ideal_completion"), str):
        fields["reference_answer"] = ideal["ideal_completion"]
    return _Converted(
        fields,
        top={"id": ("prompt_id",), "criteria": ("rubrics",), "tags": ("example_tags",)},
        item={"weight": "points", "requirement": "criterion"},
    )


def _rar(record: Mapping[str, Any]) -> _Converted:
    """RaR: ``question``, ``reference_answer``, ``rubric: [{title, description, weight}]``; the id is the
    record's ``id`` or ``question_id``, else ``rar-`` and 12 hex digits of the question's SHA-1."""
    fields = _present(record, prompt="question", criteria="rubric", reference_answer="reference_answer")
    if isinstance(fields.get("criteria"), list):
        names = {"weight": "weight", "requirement": "description", "name": "title"}
        fields["criteria"] = [_present(item, **names) for item in fields["criteria"]]
        for item in fields["criteria"]:
            if isinstance(item, dict) and isinstance(item.get("weight"), str):
                item["weight"] = _number(item["weight"])
    key = next((k for k in ("id", "question_id") if k in record), None)
    if key is not None:
        given = record[key]
        fields["id"] = str(given) if isinstance(given, int) and not isinstance(given, bool) else given
    elif isinstance(record.get("question"), str):
        fields["id"] = "rar-" + hashlib.sha1(record["question"].encode()).hexdigest()[:12]
    return _Converted(
        fields,
        top={"id": (key or "question",), "prompt": ("question",), "criteria": ("rubric",)},
        item={"requirement": "description", "name": "title"},
    )


def _present(record: Any, **names: str) -> Any:
    """``{field: record[key]}`` for each ``field=key`` that ``record`` has (a non-mapping as it is, for the
    schema to refuse)."""
    if not isinstance(record, Mapping):
        return record
    return {name: record[key] for name, key in names.items() if key in record}


def _number(text: str) -> float | str:
    """``"5"`` -> ``5.0``; text that is not a finite number stays text, for the schema to refuse."""
    try:
        value = float(text)
    except ValueError:
        return text
    return value if math.isfinite(value) else text


_CONVERTERS: dict[str, Callable[[Mapping[str, Any]], _Converted]] = {
    "native": _native,
    "healthbench": _healthbench,
    "rar": _rar,
}


def _example(record: _Record, fmt: str) -> CriteriaExample:
    """``record`` as a ``CriteriaExample``, or the error of its first problem."""
    if record.broken is not None:
        raise record.error((), record.broken)
    data = record.data
    if not isinstance(data, Mapping):
        raise record.error((), f"wrong type (expected a mapping: one {fmt} record, got {show(data)})")
    converted = _CONVERTERS[fmt](data)
    try:
        return CriteriaExample.model_validate(converted.fields)
    except ValidationError as exc:
        raise record.schema_error(_in_source(exc, converted)) from None


def _in_source(exc: ValidationError, converted: _Converted) -> ValidationError:
    """``exc`` with its locations moved to the source format's fields; of the two branches of a prompt
    (a string, or a list of messages) only the errors of the branch the record wrote are kept, and the
    "at least 1 item" echo of a criteria list whose items failed is dropped."""
    prompt = converted.fields.get("prompt")
    kept: list[dict[str, Any]] = []
    seen: set[tuple[str, Place]] = set()
    for err in exc.errors():
        kind, loc, ctx = err["type"], list(err["loc"]), err.get("ctx")
        if loc[:1] == ["prompt"] and len(loc) > 1 and isinstance(loc[1], str):
            if not isinstance(prompt, str | list):
                kind, loc, ctx = "value_error", loc[:1], {"error": _prompt_type(prompt)}
            elif not isinstance(prompt, str if loc[1] == "str" else list):
                continue
            else:
                del loc[1]
        if kind == "too_short" and loc == ["criteria"] and converted.fields.get("criteria"):
            continue
        place = converted.source(loc)
        if (kind, place) in seen:
            continue
        seen.add((kind, place))
        kept.append({"type": kind, "loc": place, "input": err["input"], **({"ctx": ctx} if ctx else {})})
    return ValidationError.from_exception_data(exc.title, kept)  # type: ignore[arg-type]


def _prompt_type(prompt: Any) -> ValueError:
    return ValueError(
        f"wrong type (expected a string or a list of messages {{role, content}}, got {show(prompt)})"
    )


# -- files ------------------------------------------------------------------------------------------------


def load_criteria_examples(
    path: str | Path, format: str = "auto", split: str | None = None
) -> list[CriteriaExample]:
    """Every example of a criteria dataset: a JSONL, JSON or parquet file, a folder written by ``datasets``,
    or a dataset repository folder (its ``data/`` when it has one).

    ``format``: one of ``FORMATS``, or ``auto`` to detect it from the first record (``detect_format``).
    ``split``: the split of a ``datasets`` folder (needed when it holds several), or, in a repository
    folder, the text that the files to read have in their path (``train`` reads ``data/train-*.parquet``);
    a single file ignores it.

    Raises:
        FileLoadError: the first bad record (file, line or row, field, reason) and how many are bad; or a
            file or folder that cannot be read."""
    if format != "auto" and format not in FORMATS:
        raise ValueError(f"format must be 'auto' or one of {', '.join(FORMATS)}, got {format!r}")
    path = Path(path)
    records = _read(path, split)
    if not records:
        raise FileLoadError(path, "holds no records (expected at least one example)")
    fmt = format if format != "auto" else _detect(records)
    examples: list[CriteriaExample] = []
    errors: list[FileLoadError] = []
    first_of: dict[str, _Record] = {}
    for record in records:
        try:
            example = _example(record, fmt)
            if example.id in first_of:
                raise _duplicate(record, first_of[example.id], example.id, fmt)
        except FileLoadError as exc:
            errors.append(exc)
            continue
        first_of[example.id] = record
        examples.append(example)
    if errors:
        first = errors[0]
        bad = f"{len(errors)} of {len(records)} {fmt} records {'is' if len(errors) == 1 else 'are'} bad"
        whole = "the folder" if path.is_dir() else "the file"
        reason = f"{first.reason} ({bad}; {whole} is refused as a whole)"
        raise FileLoadError(first.file, reason, first.line, first.field)
    return examples


def _detect(records: Sequence[_Record]) -> str:
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


def _duplicate(record: _Record, first: _Record, example_id: str, fmt: str) -> FileLoadError:
    key = {"native": "id", "healthbench": "prompt_id"}.get(fmt)
    if key is None:  # rar: the id the record wrote, or the one derived from its question
        key = next((k for k in ("id", "question_id") if k in record.data), "question")
    where = first.place() if first.doc.file == record.doc.file else f"{first.doc.file} {first.place()}"
    reason = f"the id {example_id!r} is used twice (first at {where})"
    if key == "question":
        reason = f"the same question as {where} (the id {example_id!r} is derived from the question)"
    return record.error((key,), reason)


def _read(path: Path, split: str | None) -> list[_Record]:
    if path.is_dir():
        if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
            return _read_saved(path, split)
        return _read_repository(path, split)
    if not path.exists():
        raise FileLoadError(path, "file not found")
    return _read_file(path)


def _read_file(path: Path) -> list[_Record]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _read_jsonl(path)
    if suffix == ".json":
        return _read_json(path)
    if suffix == ".parquet":
        return _read_parquet(path)
    raise FileLoadError(
        path,
        f"unknown kind of file {suffix or '(no suffix)'!r} (expected .jsonl, .json, .parquet or a folder)",
    )


def _read_jsonl(path: Path) -> list[_Record]:
    """One record per non-blank line; a line that is not JSON is a bad record (counted with the rest)."""
    records = []
    for lineno, line in enumerate(read_text(path).splitlines(), start=1):
        if line.strip():
            try:
                records.append(_Record(Document(parse_json(line, path), str(path), {(): lineno})))
            except FileLoadError as exc:
                records.append(_Record(Document(None, str(path), {(): lineno}), broken=exc.reason))
    return records


def _read_json(path: Path) -> list[_Record]:
    """A list of records, or a mapping whose ``data`` is one."""
    doc = Document(parse_json(read_text(path), path), str(path))
    where: Place = ()
    items = doc.data
    if isinstance(items, Mapping) and "data" in items:
        where, items = ("data",), items["data"]
    if not isinstance(items, list):
        expected = "a list of records, or a mapping with a 'data' list"
        raise doc.error(where, f"wrong shape (expected {expected}, got {show(items)})", FileLoadError)
    return [_Record(doc, (*where, i)) for i in range(len(items))]


def _read_parquet(path: Path) -> list[_Record]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise FileLoadError(path, "reading parquet needs pyarrow (pip install -e '.[train]')") from None
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise FileLoadError(path, f"not a readable parquet file: {exc}") from None
    return _rows(table.to_pylist(), path)


def _read_saved(path: Path, split: str | None) -> list[_Record]:
    """A folder written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk``."""
    try:
        from datasets import DatasetDict, load_from_disk
    except ImportError:
        raise FileLoadError(
            path, "reading a folder written by datasets needs datasets (pip install -e '.[train]')"
        ) from None
    try:
        data = load_from_disk(str(path))
    except (OSError, ValueError) as exc:
        raise FileLoadError(path, f"not a readable datasets folder: {exc}") from None
    if isinstance(data, DatasetDict):
        names = sorted(data)
        if split is None and len(names) != 1:
            raise FileLoadError(
                path, f"holds the splits {', '.join(names)}; choose one with env.data_split (--data-split)"
            )
        name = names[0] if split is None else split
        if name not in data:
            raise FileLoadError(path, f"has no split {name!r} (its splits: {', '.join(names)})")
        return _rows(data[name].with_format("arrow")[: len(data[name])].to_pylist(), path / name)
    if split is not None and str(data.split) != split:
        raise FileLoadError(
            path, f"holds one dataset without splits, so there is no split {split!r}; leave the split unset"
        )
    return _rows(data.with_format("arrow")[: len(data)].to_pylist(), path)


def _rows(rows: list[dict[str, Any]], path: Path) -> list[_Record]:
    """Table rows as records. Arrow gives every row every field of its column, null where the row had
    none, so a null is read as a missing field."""
    return [_Record(Document(_drop_nulls(row), str(path)), row=i) for i, row in enumerate(rows)]


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _read_repository(path: Path, split: str | None) -> list[_Record]:
    """The data files of a downloaded dataset repository (under ``data/`` when it has one), sorted by path;
    with ``split``, those whose path contains it. Hidden folders (``.git``, ``.cache``) are skipped."""
    root = path / "data" if (path / "data").is_dir() else path
    files = sorted(
        f
        for f in root.rglob("*")
        if f.suffix.lower() in SUFFIXES
        and f.is_file()
        and f.name not in _METADATA
        and not any(part.startswith(".") for part in f.relative_to(path).parts)
    )
    if not files:
        raise FileLoadError(path, f"holds no data file (expected {', '.join(SUFFIXES)} files)")
    if split is not None:
        chosen = [f for f in files if split in f.relative_to(root).as_posix()]
        if not chosen:
            names = ", ".join(f.relative_to(path).as_posix() for f in files[:10])
            raise FileLoadError(path, f"no data file has {split!r} in its path (its files: {names})")
        files = chosen
    return [record for f in files for record in _read_file(f)]
