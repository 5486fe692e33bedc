"""Run config files: a YAML file, the base file it names, and dotted overrides, validated into a
``TrainConfig`` (``train.config``) before any model is loaded.

``load_config(path, overrides)`` applies command-line overrides (``loss.beta=0.04``) on top of the file;
every error names the file and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rubrics.loading import FileLoadError, load_yaml_file, parse_yaml
from train.config import TrainConfig


class ConfigError(ValueError):
    """A config file or override is invalid; the message names the file and the field."""


def _read_config_file(path: Path, children: tuple[Path, ...]) -> dict[str, Any]:
    """The mapping of ``path``, on top of its ``base`` file when it names one (``children``: the files that
    named this one as their base, to refuse a circle)."""
    try:
        loaded = load_yaml_file(path)
    except FileLoadError as exc:
        raise ConfigError(str(exc)) from None
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top level")
    data = dict(loaded or {})
    if "base" not in data:
        return data
    base = data.pop("base")
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{path}: base: expected the path of another run config, got {base!r}")
    base_path = path.parent / base
    if base_path.resolve() in {p.resolve() for p in (path, *children)}:
        raise ConfigError(f"{path}: base: {base} is a circle (it leads back to {path.name})")
    if not base_path.is_file():
        raise ConfigError(f"{path}: base: no such file {base_path}")
    return _merged(_read_config_file(base_path, (path, *children)), data)


def _merged(base: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``own``'s keys put in: sections merge key by key, any other value replaces."""
    out = dict(base)
    for key, value in own.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def apply_override(data: dict[str, Any], override: str) -> None:
    """Apply ``a.b.c=value`` (value parsed as YAML) to nested ``data``."""
    key, sep, raw = override.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {override!r}: expected key.path=value")
    parts = key.strip().split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {override!r}: {part!r} is not a section")
        node = child
    try:
        node[parts[-1]] = parse_yaml(raw, f"override {override!r}")
    except FileLoadError as exc:
        raise ConfigError(str(exc)) from None


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """Read, override and validate a run config. A file may start from another one: ``base: OTHER.yaml``
    (relative to the file) reads OTHER first, then the file's own keys replace OTHER's, section by section."""
    data: dict[str, Any] = {}
    source = str(path) if path is not None else "<defaults>"
    if path is not None:
        data = _read_config_file(Path(path), ())
    for override in overrides:
        apply_override(data, override)
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in err['loc']) or '(top level)'}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"{source}: {problems}") from exc
