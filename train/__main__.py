"""``python -m train CONFIG [key.path=value ...]`` and ``accelerate launch -m train CONFIG ...``."""

from __future__ import annotations

import sys

from train.config import ConfigError, load_config


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: python -m train CONFIG.yaml [section.field=value ...]", file=sys.stderr)
        return 0 if args else 2
    try:
        cfg = load_config(args[0], args[1:])  # every field checked before any model is loaded
    except ConfigError as exc:
        print(f"train: {exc}", file=sys.stderr)
        return 2
    from train.preflight import PreflightError, check_inputs

    try:
        check_inputs(cfg, args[0], args[1:])  # every file the config names, before any model is loaded
    except PreflightError as exc:
        print(f"train: {exc}", file=sys.stderr)
        return 2
    from envs.models.loading import VersionError
    from train.trainer import train

    try:
        train(cfg)
    except VersionError as exc:
        print(f"train: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
