"""``python -m train CONFIG [key.path=value ...]`` and ``accelerate launch -m train CONFIG ...``; the same as
``rubric-grpo train`` (``train.commands.run_train``)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: python -m train CONFIG.yaml [section.field=value ...]", file=sys.stderr)
        return 0 if args else 2
    from train.commands import run_train

    return run_train(args[0], args[1:])


if __name__ == "__main__":
    sys.exit(main())
