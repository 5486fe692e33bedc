"""A trainer run in a process of its own, for the flat-memory tests (``tests/train/test_host_memory.py``):

    python -m tests.support.memory_run CONFIG [--coin P] [overrides ...]

runs ``CONFIG`` with ``overrides`` as ``python -m train`` does. With ``--coin P`` every rule judge answers
right with probability ``P``, drawn from a hash of its name and the reply (the same reply, the same verdict),
so the tiny random model's progressive-reveal rollouts go on past the first reply, as a trained policy's do,
and end at different depths: multi-turn rollouts of varied length. (A random model never satisfies a real
rule judge, so every rollout would stop after one reply.)
"""

from __future__ import annotations

import argparse
import zlib
from typing import Any


def install_coin_judge(p_right: float) -> None:
    """Make every ``RulesJudge`` answer its requirement's right answer with probability ``p_right``."""
    from rubrics.judges.base import response_text
    from rubrics.judges.formats import JudgeResponse
    from rubrics.judges.rules import RulesJudge

    async def coin(
        self: RulesJudge, prompt: Any, completion: Any, answer: Any = None, state: Any = None
    ) -> JudgeResponse:
        draw = zlib.crc32(f"{self.name}|{response_text(completion)}".encode()) / 2**32
        right = answer.get("answer") if isinstance(answer, dict) else None
        return JudgeResponse(answer=right if draw < p_right else None, reasoning="coin")

    RulesJudge.__call__ = coin  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("--coin", type=float, default=None, help="rule judges answer right with this chance")
    args, overrides = parser.parse_known_args()
    if args.coin is not None:
        install_coin_judge(args.coin)
    from train.config_files import load_config
    from train.trainer import train

    train(load_config(args.config, overrides))


if __name__ == "__main__":
    main()
