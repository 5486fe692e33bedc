"""What the rubric and scenario loaders share: their error type, the format version, and the steps every
part of a file goes through (read strictly, check the version, check against a schema model, raise at a
place). Messages follow ``rubrics.loading``'s style."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from rubrics.loading import Document, FileLoadError, load_yaml_document, schema_error
from rubrics.messages import show

FORMAT_VERSION = 1
"""The version written by this code, and the only one it reads."""

M = TypeVar("M", bound=BaseModel)


class RubricFileError(FileLoadError):
    """A rubric or scenario file is malformed; carries ``file``, ``line`` and ``field`` (a ``ValueError``)."""


def error_at(doc: Document, where: Sequence[Any], reason: str) -> RubricFileError:
    """A ``RubricFileError`` at ``where`` in ``doc``, with its line."""
    return doc.error(where, reason, RubricFileError)


def validated(doc: Document, where: tuple[Any, ...], model: type[M], data: Any) -> M:
    """``data`` (the part of ``doc`` at ``where``) checked against ``model``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise schema_error(exc, doc, where, model, RubricFileError) from None


def part_at(data: Any, where: tuple[Any, ...]) -> Any:
    """The part of ``data`` at ``where``."""
    for part in where:
        data = data[part]
    return data


def read_yaml(path: Path) -> Document:
    """The YAML document of ``path``, read strictly (``rubrics.loading``: UTF-8, no duplicate keys, bounded
    nesting and aliases)."""
    try:
        return load_yaml_document(path)
    except FileLoadError as exc:
        raise RubricFileError(exc.file, exc.reason, exc.line, exc.field) from None


def check_version(doc: Document, data: Mapping[Any, Any]) -> None:
    """Refuse a ``format_version`` other than ``FORMAT_VERSION``."""
    version = data.get("format_version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise error_at(
            doc, ("format_version",), f"unsupported version (expected {FORMAT_VERSION}, got {show(version)})"
        )
