"""``MathRubric``: symbolic answer checking with the ``math-verify`` package.

Verification runs in a process pool (sympy can hang on adversarial input) with a timeout on every call;
a timeout or a crash is reported as an error on the rollout, not scored 0.0.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
from collections.abc import Sequence
from typing import Any

from rubrics.parsers import Parser, last_message_text
from rubrics.rubric import Rubric
from rubrics.types import Messages, RewardFunc


def extract_boxed(text: str) -> str | None:
    r"""The content of the last ``\boxed{...}`` in ``text`` (braces balanced), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i = start + len("\\boxed{")
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def verify_answer(response: str, answer: str, timeout_s: float) -> float:
    """1.0 when ``response`` is mathematically equal to ``answer`` (runs in a worker process)."""
    from math_verify import parse, verify

    gold = parse(
        answer if "$" in answer or "\\boxed" in answer else f"${answer}$", parsing_timeout=int(timeout_s)
    )
    guess = parse(
        response if "$" in response or "\\boxed" in response else f"${response}$",
        parsing_timeout=int(timeout_s),
    )
    if not gold or not guess:
        return 0.0
    return 1.0 if verify(gold, guess, timeout_seconds=int(timeout_s)) else 0.0


class MathRubric(Rubric):
    r"""Rewards a completion whose final answer equals ``answer`` (``correct_answer``, weight 1.0).

    ``extract_answer=True`` reads the last ``\boxed{...}`` of the parsed completion (falling back to the
    whole text); ``normalize=True`` strips whitespace and a trailing period before verification.
    """

    def __init__(
        self,
        funcs: Sequence[RewardFunc] | None = None,
        weights: Sequence[float] | None = None,
        parser: Parser | None = None,
        extract_answer: bool = True,
        normalize: bool = True,
        timeout_s: float = 5.0,
        max_workers: int = 2,
        **kwargs: Any,
    ) -> None:
        super().__init__(funcs=funcs, weights=weights, parser=parser, **kwargs)
        self.extract_answer = extract_answer
        self.normalize = normalize
        self.timeout_s = timeout_s
        self.max_workers = max_workers
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self.add_reward_func(self.correct_answer, 1.0)

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")  # never fork a process that runs an event loop
            self._pool = concurrent.futures.ProcessPoolExecutor(self.max_workers, mp_context=ctx)
        return self._pool

    def close(self) -> None:
        """Shut the verification workers down."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _response_text(self, completion: Messages | str) -> str | None:
        text = self.parser.parse_answer(completion) if completion is not None else None
        if text is None:
            text = last_message_text(completion)
        if text is None:
            return None
        if self.extract_answer:
            text = extract_boxed(text) or text
        if self.normalize:
            text = text.strip().rstrip(".").strip()
        return text

    async def correct_answer(self, completion: Messages | str, answer: Any, **kwargs: Any) -> float:
        """1.0 if the completion's final answer verifies against ``answer``, else 0.0."""
        response = self._response_text(completion)
        if response is None or response == "":
            return 0.0
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor(), verify_answer, response, str(answer), self.timeout_s)
        try:
            return await asyncio.wait_for(future, timeout=self.timeout_s * 2 + 30.0)
        except TimeoutError as exc:
            raise TimeoutError(
                f"math verification took longer than {self.timeout_s * 2 + 30.0:.0f}s"
            ) from exc
