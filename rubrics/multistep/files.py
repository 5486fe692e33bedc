"""The file format (version 1) of rubric and scenario files: how a field is typed in a file, how a class's
file schema is derived from the class, and the steps every part of a file goes through (read strictly,
check the version, check against its schema, raise at a place). Messages follow ``rubrics.loading``'s style.

A field is declared once, on its class (``Requirement``, ``LLMRequirementJudge``, ``Scenario``), with its
docstring, default and the type a file must give. ``file_schema`` turns the class's fields into the pydantic
model a file's part is checked against, so every type error names the field path, the expected type and the
value given (``rubrics.loading.schema_error``). Numbers are strict: ``true`` is not a number and ``"0.5"``
is not either; a name is a string, never a date or a list. What a schema cannot see (a dependency key
outside the answer domain, a cycle, an unknown judge) is checked by the classes themselves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_args, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, create_model

from rubrics.error_text import show
from rubrics.loading import Document, FileLoadError, load_yaml_document, schema_error

FORMAT_VERSION = 1
"""The version written by this code, and the only one it reads."""

Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
"""A finite number (an integer is fine; ``true`` and ``"1"`` are not)."""
Positive = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0)]
"""A finite number above zero."""
Text = Annotated[StrictStr, Field(min_length=1)]
"""A non-empty string."""

M = TypeVar("M", bound=BaseModel)


class FileSchema(BaseModel):
    """A part of a file: its fields and nothing else."""

    model_config = ConfigDict(extra="forbid")


@dataclasses.dataclass(frozen=True)
class InFile:
    """Field metadata: the type a file gives the field, where it differs from the Python one (a field a
    file may leave empty, a list of options that becomes a mapping, a value checked by hand)."""

    type: Any
    """The field's type in a file."""


@dataclasses.dataclass(frozen=True)
class Flat:
    """Field metadata: the field holds a pydantic model whose fields a file writes flat, beside the part's
    own (an LLM judge's ``JudgeEndpoint`` settings under the judge's name)."""


def _flat_fields(model: type[BaseModel]) -> dict[str, Any]:
    """The fields of ``model`` as file fields: its types, required or else None by default."""
    hints = get_type_hints(model, include_extras=True)
    return {name: (hints[name], ... if f.is_required() else None) for name, f in model.model_fields.items()}


def file_schema(
    cls: type,
    tag: str | None = None,
    tag_after: str | None = None,
    more: Mapping[str, tuple[Any, Any]] | None = None,
) -> type[FileSchema]:
    """The schema of ``cls`` (a dataclass) as a file writes it: one field per dataclass field, typed by its
    ``InFile`` metadata or else by its annotation, in the class's order; ``InFile(None)`` keeps a field out
    of the file (a judge's ``name`` is its key), and a ``Flat`` field's model gives its own fields in its
    place. A field with a default may be left out of the file: the schema's default is then None, left out
    by ``model_dump(exclude_none=True)``, and the class's default applies. ``tag``: the key that says which
    class a part is (checked before), placed after the field ``tag_after`` (first when None). ``more``:
    fields the class holds otherwise, ``name -> (type, default)``."""
    hints = get_type_hints(cls, include_extras=True)
    fields: dict[str, Any] = {} if tag is None or tag_after is not None else {tag: (Any, None)}
    for field in dataclasses.fields(cls):
        annotation = hints[field.name]
        in_file = [m for m in getattr(annotation, "__metadata__", ()) if isinstance(m, InFile)]
        if in_file and in_file[0].type is None:
            continue
        if any(isinstance(m, Flat) for m in getattr(annotation, "__metadata__", ())):
            fields.update(_flat_fields(get_args(annotation)[0]))
            continue
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        fields[field.name] = (in_file[0].type if in_file else annotation, ... if required else None)
        if tag is not None and field.name == tag_after:
            fields[tag] = (Any, None)
    fields.update(more or {})
    return create_model(cls.__name__, __base__=FileSchema, __doc__=cls.__doc__, **fields)


def distinct(what: str) -> Callable[[list[Any]], list[Any]]:
    """A validator refusing a list that repeats a value (a set of ``what``: option values, labels)."""

    def check(values: list[Any]) -> list[Any]:
        first: dict[Any, int] = {}
        for i, value in enumerate(getattr(v, "value", v) for v in values):
            if value in first:
                raise ValueError(
                    f"{what} {show(value)} is repeated (items {first[value]} and {i}); each must be distinct"
                )
            first[value] = i
        return values

    return check


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
