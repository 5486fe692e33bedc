"""Walking a multi-step rubric over a reply: frontier by frontier, judged concurrently.

Semantics (seed 004: paths advance on correct judgments): a requirement is judged on the reply and is
correct when the judged answer agrees with the scenario's ground truth; a correct requirement unlocks the
requirements of its **ground-truth** answer; an incorrect one closes its branch. A requirement reached by
two branches is judged once. The walk is a small state machine (``Walk``) so the progressive-reveal
environment can feed it one reply per turn; ``evaluate`` runs it over a single reply.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from rubrics.multistep.dag import Graph
from rubrics.multistep.judging import RequirementJudge
from rubrics.multistep.requirements import Answer, Requirement
from rubrics.types import Messages

STOP_REASONS = ("terminal", "incorrect", "missing_ground_truth")
"""Why a walk ended: every branch reached a terminal; some branch was judged incorrect (or got no
verdict); the scenario has no ground truth for an unlocked requirement. Environments add their own
(``max_turns``, ``token_budget``)."""


@dataclass
class RequirementResult:
    """The verdict on one requirement."""

    name: str
    """The requirement."""
    level: int
    """Its topological level in the DAG (0 for roots)."""
    answer: Answer | None
    """The judged answer (None: the judge matched no answer)."""
    truth: Answer
    """The scenario's ground-truth answer."""
    correct: bool
    """Whether the judged answer agrees with the ground truth."""
    reasoning: str = ""
    """The judge's explanation."""
    judge: str = ""
    """Which judge answered."""
    turn: int = 0
    """The model turn whose reply was judged (multi-turn environments)."""


@dataclass
class EvaluationResult:
    """Everything one walk decided."""

    results: list[RequirementResult] = field(default_factory=list)
    """Judged requirements in judging order."""
    stop_reason: str = "terminal"
    """Why the walk ended (see ``STOP_REASONS``)."""

    @property
    def path(self) -> list[str]:
        """The requirements judged correct, in order: the path taken."""
        return [r.name for r in self.results if r.correct]

    @property
    def depth(self) -> int:
        """Levels reached: one more than the deepest correct requirement's level (0 when none)."""
        return max((r.level + 1 for r in self.results if r.correct), default=0)

    def by_name(self) -> dict[str, RequirementResult]:
        """Results keyed by requirement name."""
        return {r.name: r for r in self.results}

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for states and logs)."""
        return {"results": [asdict(r) for r in self.results], "stop_reason": self.stop_reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvaluationResult:
        """Inverse of ``to_dict``."""
        return cls(
            results=[RequirementResult(**r) for r in data.get("results", [])],
            stop_reason=str(data.get("stop_reason", "terminal")),
        )


def truth_of(answers: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The scenario's ground truth for ``name`` as ``{"answer": ..., "reasoning": ...}``, or None."""
    entry = answers.get(name)
    if entry is None:
        return None
    if isinstance(entry, Mapping):
        return {"answer": entry.get("answer"), "reasoning": str(entry.get("reasoning", "") or "")}
    return {"answer": entry, "reasoning": ""}


class Walk:
    """The evaluation state of one rollout: what is judged, what waits, why it stopped."""

    def __init__(
        self,
        graph: Graph,
        judges: Mapping[str, RequirementJudge],
        default_judge: str,
        answers: Mapping[str, Any],
    ) -> None:
        self.graph = graph
        self.judges = judges
        self.default_judge = default_judge
        self.answers = answers
        self.result = EvaluationResult()
        self.frontier: list[str] = list(graph.roots)
        """Requirements to judge on the next reply."""
        self._seen: set[str] = set()
        self._closed_incorrect = False
        self._missing_truth = False

    @property
    def done(self) -> bool:
        """True when nothing is left to judge."""
        return not self.frontier

    def stop_reason(self) -> str:
        """Why the walk ended (or would end now)."""
        if self._closed_incorrect:
            return "incorrect"
        if self._missing_truth:
            return "missing_ground_truth"
        return "terminal"

    async def judge_frontier(
        self, prompt: Messages | str | None, completion: Messages | str | None, turn: int = 0
    ) -> list[RequirementResult]:
        """Judge every frontier requirement on ``completion`` concurrently; returns the new results and
        leaves the unlocked requirements in ``frontier``. Judge errors propagate (the rollout is marked)."""
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
        verdicts = await asyncio.gather(*(self._judge(req, truth, prompt, completion) for req, truth in todo))
        new: list[RequirementResult] = []
        unlocked: list[str] = []
        for (req, truth), (answer, reasoning, judge) in zip(todo, verdicts, strict=True):
            correct = answer is not None and req.is_correct(answer, truth["answer"])
            result = RequirementResult(
                name=req.name,
                level=self.graph.levels[req.name],
                answer=answer,
                truth=truth["answer"],
                correct=correct,
                reasoning=reasoning,
                judge=judge,
                turn=turn,
            )
            new.append(result)
            if correct:
                unlocked.extend(
                    n for n in req.route(truth["answer"]) if n not in self._seen and n not in unlocked
                )
            else:
                self._closed_incorrect = True
        self.result.results.extend(new)
        self.frontier = unlocked
        self.result.stop_reason = self.stop_reason()
        return new

    async def _judge(
        self,
        req: Requirement,
        truth: dict[str, Any],
        prompt: Messages | str | None,
        completion: Messages | str | None,
    ) -> tuple[Answer | None, str, str]:
        judge_name = req.judge or self.default_judge
        verdict = await self.judges[judge_name].judge(req, prompt, completion, truth)
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
    """Walk the whole DAG over one reply."""
    walk = Walk(graph, judges, default_judge, answers)
    while not walk.done:
        await walk.judge_frontier(prompt, completion)
    return walk.result


def ground_truth_walk(graph: Graph, answers: Mapping[str, Any]) -> EvaluationResult:
    """The best walk a reply can achieve: every requirement on the ground-truth path judged correct."""
    result = EvaluationResult()
    frontier, seen = list(graph.roots), set()
    while frontier:
        unlocked: list[str] = []
        for name in frontier:
            if name in seen:
                continue
            seen.add(name)
            truth = truth_of(answers, name)
            if truth is None:
                result.stop_reason = "missing_ground_truth"
                continue
            req = graph.requirements[name]
            result.results.append(
                RequirementResult(
                    name, graph.levels[name], truth["answer"], truth["answer"], True, "ground truth"
                )
            )
            unlocked.extend(n for n in req.route(truth["answer"]) if n not in seen and n not in unlocked)
        frontier = unlocked
    return result
