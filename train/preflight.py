"""Every file a run config names, read and checked before anything heavy loads (a model, a tokenizer, a
backend), so that a typo costs a second, not a model load and a traceback.

``check_inputs(cfg, config_path)`` reads what the run will read (the rubric, the scenarios, the examples, the
demonstrations) with the loaders the run uses, and resolves what the config says about them (the judge
chosen and pointed at an endpoint, the held-out split). Its ``PreflightError`` is one line:
``FILE:LINE: where: what`` for an error inside a named file (the loaders' style), ``CONFIG[:LINE]: field:
what`` for a config field that names a missing file or does not fit the files.
"""

from __future__ import annotations

import re
from pathlib import Path

from rubrics.loading import FileLoadError, load_yaml_document
from train.config import TrainConfig


class PreflightError(ValueError):
    """A file a run config names is missing or malformed; the message is one line naming the place."""


def _config_lines(config_path: str | Path | None) -> dict[str, int]:
    """The line of each ``section.field`` in the config file (empty without a file)."""
    if config_path is None:
        return {}
    try:
        doc = load_yaml_document(config_path)
    except FileLoadError:
        return {}
    return {".".join(map(str, place)): line for place, line in doc.lines.items() if len(place) == 2}


def named_files(cfg: TrainConfig) -> list[tuple[str, str, bool]]:
    """``(field, path, a folder will do)`` for every input file the config names."""
    named = cfg.env.input_files()
    if cfg.warm_start.demonstrations:
        named.append(("warm_start.demonstrations", cfg.warm_start.demonstrations, False))
    return named


def _missing(path: str, folder_ok: bool) -> str | None:
    """Why ``path`` cannot be read as the input it names, or None."""
    p = Path(path)
    if p.is_file():
        return None
    if folder_ok and p.is_dir():
        return None
    if p.is_dir():
        return f"{path} is a folder (expected a file)"
    return f"file not found: {path}"


def check_inputs(
    cfg: TrainConfig, config_path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> None:
    """Read every file ``cfg`` names as the run will; ``PreflightError`` (one line) at the first problem.
    ``config_path`` and ``overrides`` (``section.field=value``) are where ``cfg`` came from: a field's line
    in the file is named unless an override replaced it."""
    from envs.build import check_env_inputs
    from train.demonstrations import load_demonstrations

    lines = _config_lines(config_path)
    for override in overrides:
        lines.pop(override.partition("=")[0].strip(), None)

    def at(field: str) -> str:
        source = str(config_path) if config_path is not None else "<config>"
        line = lines.get(field)
        return f"{source}:{line}: {field}" if line is not None else f"{source}: {field}"

    for field, path, folder_ok in named_files(cfg):
        problem = _missing(path, folder_ok)
        if problem is not None:
            raise PreflightError(f"{at(field)}: {problem}")
    model = cfg.model.name_or_path
    if ("/" in model or model.startswith(".")) and not Path(model).is_dir():
        raise PreflightError(f"{at('model.name_or_path')}: no such folder: {model}")
    try:
        check_env_inputs(cfg.env)
        if cfg.warm_start.demonstrations:
            load_demonstrations(cfg.warm_start.demonstrations)
        if cfg.rollout.sampler != "shuffle":
            check_sampler(cfg)
    except FileLoadError as exc:  # inside a named file: the file's own line and field
        raise PreflightError(str(exc)) from None
    except ValueError as exc:  # a config field that does not fit the files: "env.judge: ..."
        field, _, what = str(exc).partition(": ")
        if re.fullmatch(r"[a-z_]+\.[a-z_]+", field) and what:
            raise PreflightError(f"{at(field)}: {what}") from None
        raise PreflightError(f"{at('env')}: {exc}") from None


def check_sampler(cfg: TrainConfig) -> None:
    """Build ``rollout.sampler`` over the training examples' strata as the run will (the environment without a
    model or tokenizer: ``Environment.stratum`` reads the examples only); ``ValueError`` naming
    ``rollout.sampler`` when it has nothing to balance."""
    from envs.backends.base import SamplingParams
    from envs.build import make_env
    from train.sampling import make_sampler

    env, train, _ = make_env(cfg.env, tokenizer=None, sampling=SamplingParams())
    make_sampler(cfg.rollout.sampler, [env.stratum(e) for e in train], cfg.seed)
