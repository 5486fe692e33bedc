"""The records of a per-prompt criteria dataset as read from local files (``docs/criteria_data.md``):
JSONL, JSON (a list of records or ``{"data": [...]}``), parquet, and a folder, one written by ``datasets``
(``save_to_disk``) or a downloaded dataset repository holding such files. Each record keeps its place, which
an error about it names (``FILE:LINE``, ``FILE: [3]`` or ``FILE: row 12``). Nothing is fetched from a hub."""

from __future__ import annotations

import codecs
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rubrics.criteria.example import CriteriaExample
from rubrics.error_text import field_path, show
from rubrics.loading import Document, FileLoadError, Place, parse_json, read_text, schema_error

SUFFIXES = (".jsonl", ".json", ".parquet")
"""The data files read, alone or inside a dataset repository folder."""

_METADATA = {"dataset_info.json", "dataset_infos.json", "dataset_dict.json", "state.json"}
"""JSON files of a dataset folder that describe the data rather than hold it."""


@dataclass(frozen=True)
class Record:
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


def read_records(path: Path, split: str | None) -> Iterator[Record]:
    """Every record of a JSONL, JSON or parquet file, a ``datasets`` folder or a dataset repository folder.
    A JSONL file is read as it is iterated, one line at a time (never held whole); a missing file or an
    empty folder is refused at once."""
    if path.is_dir():
        if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
            return iter(_read_saved(path, split))
        return _read_repository(path, split)
    if not path.exists():
        raise FileLoadError(path, "file not found")
    return _read_file(path)


def _read_file(path: Path) -> Iterator[Record]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _read_jsonl(path)
    if suffix == ".json":
        return iter(_read_json(path))
    if suffix == ".parquet":
        return _read_parquet(path)
    raise FileLoadError(
        path,
        f"unknown kind of file {suffix or '(no suffix)'!r} (expected .jsonl, .json, .parquet or a folder)",
    )


def _read_jsonl(path: Path) -> Iterator[Record]:
    """One record per non-blank line, read line by line; a line that is not JSON is a bad record (counted
    with the rest). A UTF-16 file, or bytes that are not UTF-8, are refused as ``read_text`` refuses them."""
    with path.open("rb") as handle:
        offset = 0
        for lineno, raw in enumerate(handle, start=1):
            if lineno == 1 and raw.startswith((b"\xff\xfe", b"\xfe\xff")):
                raise FileLoadError(
                    path, "the file is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8"
                )
            start = len(codecs.BOM_UTF8) if lineno == 1 and raw.startswith(codecs.BOM_UTF8) else 0
            try:
                line = raw[start:].decode("utf-8")
            except UnicodeDecodeError as exc:
                at = start + exc.start
                where = f"byte 0x{raw[at]:02x} at offset {offset + at} ({exc.reason})"
                raise FileLoadError(path, f"not UTF-8: {where}; save it as UTF-8", lineno) from None
            offset += len(raw)
            if line.strip():
                try:
                    yield Record(Document(parse_json(line, path), str(path), {(): lineno}))
                except FileLoadError as exc:
                    yield Record(Document(None, str(path), {(): lineno}), broken=exc.reason)


def _read_json(path: Path) -> list[Record]:
    """A list of records, or a mapping whose ``data`` is one."""
    doc = Document(parse_json(read_text(path), path), str(path))
    where: Place = ()
    items = doc.data
    if isinstance(items, Mapping) and "data" in items:
        where, items = ("data",), items["data"]
    if not isinstance(items, list):
        expected = "a list of records, or a mapping with a 'data' list"
        raise doc.error(where, f"wrong shape (expected {expected}, got {show(items)})", FileLoadError)
    return [Record(doc, (*where, i)) for i in range(len(items))]


def _read_parquet(path: Path) -> Iterator[Record]:
    """The file's rows as records, a batch of rows at a time: the whole table is never turned into Python
    objects at once (docs/results.md, the criteria data at full size)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise FileLoadError(path, "reading parquet needs pyarrow (pip install -e '.[train]')") from None
    row = 0
    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=PARQUET_BATCH_ROWS)
        batch = next(batches, None)
        while batch is not None:
            for values in batch.to_pylist():
                yield Record(Document(_drop_nulls(values), str(path)), row=row)
                row += 1
            batch = next(batches, None)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise FileLoadError(path, f"not a readable parquet file: {exc}") from None
    pa.default_memory_pool().release_unused()  # pyarrow's allocator keeps freed batches: 30 MiB at full size


PARQUET_BATCH_ROWS = 512
"""Rows of a parquet file turned into Python objects at once."""


def _read_saved(path: Path, split: str | None) -> list[Record]:
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


def _rows(rows: list[dict[str, Any]], path: Path) -> list[Record]:
    """Table rows as records. Arrow gives every row every field of its column, null where the row had
    none, so a null is read as a missing field."""
    return [Record(Document(_drop_nulls(row), str(path)), row=i) for i, row in enumerate(rows)]


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _read_repository(path: Path, split: str | None) -> Iterator[Record]:
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
    return (record for f in files for record in _read_file(f))
