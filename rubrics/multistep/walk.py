"""Walking a multi-step rubric over replies: frontier by frontier, judged concurrently.

Semantics (paths advance on correct judgments): a requirement is judged on the reply and is
correct when the judged answer agrees with the scenario's ground truth; a correct requirement unlocks the
requirements of its **ground-truth** answer; an incorrect one closes its branch. A requirement reached by
two branches is judged once. What a correct requirement with a revealed text unlocks waits for the next
reply (progressive reveal).

``Walk`` is that state machine, the one place that owns the routing, the frontier and the stop reason:
``Walk.advance`` judges one reply as far as it goes and returns an ``Advance`` (what to reveal, or why the
walk ended). The progressive-reveal environment calls it once per model turn; ``evaluate`` runs it over a
single reply and ``ground_truth_walk`` follows the scenario's own answers with the same bookkeeping. The
verdicts it records (``RequirementResult``, ``EvaluationResult``) are core types (``rubrics.types``): a
rollout state carries them as they are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rubrics.multistep.dag import Graph
from rubrics.multistep.judging import RequirementJudge
from rubrics.multistep.requirements import Answer, Requirement
from rubrics.types import EvaluationResult, Messages, RequirementResult, StopReason

STOP_REASONS = (StopReason.TERMINAL, StopReason.INCORRECT, StopReason.MISSING_GROUND_TRUTH)
"""Why a walk ends by itself (see ``StopReason``). Environments add their own (``max_turns``,
``token_budget``)."""


@dataclass(frozen=True)
class Advance:
    """What one reply did to a walk (``Walk.advance``)."""

    results: list[RequirementResult]
    """The verdicts made on this reply, in judging order."""
    reveals: list[str]
    """Revealed texts of the requirements this reply satisfied that unlock something, in judging order: what
    the model is shown before its next reply while the walk goes on."""
    stop_reason: StopReason | None
    """Why the walk ended on this reply, or None when requirements wait for the next reply."""

    @property
    def done(self) -> bool:
        """True when nothing is left to judge."""
        return self.stop_reason is not None


def truth_of(answers: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The scenario's ground truth for ``name`` as ``{"answer": ..., "reasoning": ...}``, or None."""
    entry = answers.get(name)
    if entry is None:
        return None
    if isinstance(entry, Mapping):
        return {"answer": entry.get("answer"), "reasoning": str(entry.get("reasoning", "") or "")}
    return {"answer": entry, "reasoning": ""}


class Walk:
    """The state of one walk over a rubric's DAG: what was judged, what the next reply is judged on, and
    why it stopped.

    One step is ``advance``: judge one reply as far as it goes. A correct requirement unlocks the
    requirements of its ground-truth answer (``Requirement.route``); an incorrect one closes its branch; a
    requirement reached by two branches is judged once. Unlocked requirements are judged on the same reply
    at once, unless a requirement that unlocked them has a revealed text (``reveals``): then they wait for
    the next reply and the text is returned, to be shown to the model first (also when another parent
    unlocked them without a text: their judgment may need what the text says). Without reveals one ``advance``
    walks the whole DAG over one reply (``evaluate``); with them a progressive-reveal environment calls it
    once per model turn. The walk never judges anything twice and holds no torch or environment state.
    """

    def __init__(
        self,
        graph: Graph,
        judges: Mapping[str, RequirementJudge],
        default_judge: str,
        answers: Mapping[str, Any],
        reveals: Mapping[str, str] | None = None,
    ) -> None:
        self.graph = graph
        """The rubric's validated DAG."""
        self.judges = judges
        """Judges by name."""
        self.default_judge = default_judge
        """The judge of requirements that name none."""
        self.answers = answers
        """The scenario's ground truth: requirement name -> ``{"answer", "reasoning"}`` (or a bare answer)."""
        self.reveals: Mapping[str, str] = reveals or {}
        """Requirement name -> text shown once it is judged correct; what it unlocks waits for the next
        reply."""
        self.result = EvaluationResult()
        """Every verdict so far, and the walk's stop reason."""
        self.frontier: list[str] = list(graph.roots)
        """Requirements to judge on the next reply (empty: the walk is done)."""
        self._seen: set[str] = set()
        """Requirements taken off a frontier (judged, or found without ground truth)."""
        self._closed_incorrect = False
        """Whether some branch was closed by an incorrect verdict."""
        self._missing_truth = False
        """Whether the walk reached a requirement the scenario has no ground truth for."""

    @property
    def done(self) -> bool:
        """True when nothing is left to judge."""
        return not self.frontier

    @property
    def stop_reason(self) -> StopReason:
        """Why the walk ended (or would end now): ``incorrect`` before ``missing_ground_truth`` before
        ``terminal``."""
        if self._closed_incorrect:
            return StopReason.INCORRECT
        if self._missing_truth:
            return StopReason.MISSING_GROUND_TRUTH
        return StopReason.TERMINAL

    async def advance(
        self, prompt: Messages | str | None, completion: Messages | str | None, turn: int = 0
    ) -> Advance:
        """Judge one reply (``completion``, after ``prompt``) as far as it goes.

        The frontier is judged concurrently; what a correct requirement without a revealed text unlocks is
        judged next on the same reply, level after level. What a correct requirement with a revealed text
        unlocks (whoever else unlocked it) stays in ``frontier`` for the next reply, and the text is returned
        in ``Advance.reveals``.
        Judge errors propagate (the caller marks the rollout)."""
        results: list[RequirementResult] = []
        reveals: list[str] = []
        waiting: list[str] = []
        after_reveal: set[str] = set()  # unlocked by a revealing parent: they need the text first
        now = list(self.frontier)
        while now:
            self.frontier = now
            new = await self.judge_frontier(prompt, completion, turn)
            results.extend(new)
            same_reply: set[str] = set()
            for r in new:
                if not r.correct:
                    continue
                unlocked = self.graph.requirements[r.name].route(r.truth)
                if r.name in self.reveals and unlocked:
                    reveals.append(self.reveals[r.name])
                    after_reveal.update(unlocked)
                else:
                    same_reply.update(unlocked)
            now = [n for n in self.frontier if n in same_reply and n not in after_reveal]
            waiting += [n for n in self.frontier if n not in now and n not in waiting]
        self.frontier = waiting
        return Advance(results, reveals, None if waiting else self.stop_reason)

    async def judge_frontier(
        self, prompt: Messages | str | None, completion: Messages | str | None, turn: int = 0
    ) -> list[RequirementResult]:
        """One level: judge every frontier requirement on ``completion`` concurrently; returns the new
        results and leaves everything they unlock in ``frontier`` (reveals are ``advance``'s business)."""
        todo = self._take_frontier()
        verdicts = await asyncio.gather(*(self._judge(req, truth, prompt, completion) for req, truth in todo))
        new = [
            RequirementResult(
                name=req.name,
                level=self.graph.levels[req.name],
                answer=answer,
                truth=truth["answer"],
                correct=answer is not None and req.is_correct(answer, truth["answer"]),
                reasoning=reasoning,
                judge=judge,
                turn=turn,
            )
            for (req, truth), (answer, reasoning, judge) in zip(todo, verdicts, strict=True)
        ]
        self._settle(new)
        return new

    def _take_frontier(self) -> list[tuple[Requirement, dict[str, Any]]]:
        """The frontier's requirements not seen before, with their ground truth; marks them seen and notes
        those without ground truth (never judged)."""
        todo: list[tuple[Requirement, dict[str, Any]]] = []
        for name in self.frontier:
            if name in self._seen:
                continue
            self._seen.add(name)
            truth = truth_of(self.answers, name)
            if truth is None:
                self._missing_truth = True
                continue
            todo.append((self.graph.requirements[name], truth))
        return todo

    def _settle(self, new: list[RequirementResult]) -> None:
        """Record verdicts: correct ones unlock their ground-truth branch into ``frontier``, incorrect ones
        close theirs."""
        unlocked: list[str] = []
        for r in new:
            if r.correct:
                routed = self.graph.requirements[r.name].route(r.truth)
                unlocked.extend(n for n in routed if n not in self._seen and n not in unlocked)
            else:
                self._closed_incorrect = True
        self.result.results.extend(new)
        self.frontier = unlocked
        self.result.stop_reason = self.stop_reason

    async def _judge(
        self,
        req: Requirement,
        truth: dict[str, Any],
        prompt: Messages | str | None,
        completion: Messages | str | None,
    ) -> tuple[Answer | None, str, str]:
        judge_name = req.judge or self.default_judge
        verdict = await self.judges[judge_name].judge_for(req)(prompt, completion, truth)
        answer = verdict.answer
        if answer is not None:
            answer = req.validate_answer(answer)
        return answer, verdict.reasoning, judge_name


async def evaluate(
    graph: Graph,
    judges: Mapping[str, RequirementJudge],
    default_judge: str,
    answers: Mapping[str, Any],
    prompt: Messages | str | None,
    completion: Messages | str | None,
) -> EvaluationResult:
    """Walk the whole DAG over one reply (no reveals: everything unlocked is judged on it)."""
    walk = Walk(graph, judges, default_judge, answers)
    await walk.advance(prompt, completion)
    return walk.result


def ground_truth_walk(graph: Graph, answers: Mapping[str, Any]) -> EvaluationResult:
    """The best walk a reply can achieve: every requirement on the ground-truth path judged correct."""
    walk = Walk(graph, {}, "", answers)
    while not walk.done:
        walk._settle(
            [
                RequirementResult(
                    req.name, graph.levels[req.name], t["answer"], t["answer"], True, "ground truth"
                )
                for req, t in walk._take_frontier()
            ]
        )
    return walk.result
