"""Validation by re-grading: the rubric's own judges must agree with the scenario's ground truth.

1. **Ideal replies pass their path** (drop reason ``regrade_ideal_failed``): the turns a perfect rollout
   takes are found by walking the ground truth with reveals (``Walk`` with a judge that always agrees);
   each turn's reply is the scenario's ideal replies for the requirements judged on that turn. Replayed
   through a fresh ``rubric.walk`` (progressive reveal, as the environment runs it), every requirement of
   the planned route must be judged correct and the walk must end at its terminals.
2. **A wrong branch fails at the branching point** (drop reason ``regrade_wrong_passed``): the scenario's
   wrong reply, which concludes another branch's answer at the planned branching requirement, is judged
   on that requirement after the same conversation; it must be judged incorrect.

A judge that errors after its retries drops the item as ``regrade_error``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envs.synth.plan import PlannedItem
from envs.synth.validate import CheckError
from rubrics.judges.base import Judge
from rubrics.judges.rules import CallableJudge
from rubrics.multistep.requirements import Requirement
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.scenario import Scenario
from rubrics.multistep.walk import Walk
from rubrics.types import Messages, StopReason


@dataclass
class _AgreeingJudge:
    """Answers every requirement with its ground truth: the turns of a perfect rollout."""

    name: str = "truth"

    def cannot_answer(self, requirement: Requirement) -> str | None:
        return None

    def judge_for(self, requirement: Requirement) -> Judge:
        def agree(answer: Any) -> tuple[Any, str]:
            return answer["answer"], "ground truth"

        return CallableJudge(agree, name=requirement.name, response_format=requirement.response_format)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "truth"}


async def ideal_turns(rubric: MultiStepRubric, scenario: Scenario) -> list[list[str]]:
    """The requirements judged on each turn of a perfect progressive-reveal rollout."""
    walk = Walk(rubric.graph, {"truth": _AgreeingJudge()}, "truth", scenario.answers, scenario.revealed_info)
    turns: list[list[str]] = []
    while not walk.done:
        advance = await walk.advance(None, None, len(turns))
        turns.append([r.name for r in advance.results])
    return turns


async def regrade(
    rubric: MultiStepRubric,
    scenario: Scenario,
    item: PlannedItem,
    ideal: Mapping[str, str],
    wrong_reply: str | None,
) -> dict[str, Any]:
    """Re-grade ``scenario``; returns what was judged, or ``CheckError`` with the drop reason."""
    turns = await ideal_turns(rubric, scenario)
    wrong_at = item.wrong.get("requirement") if item.wrong else None
    walk = rubric.walk(scenario.answers, scenario.revealed_info)
    messages: list[dict[str, Any]] = _as_messages(scenario.prompt)
    before_wrong: list[dict[str, Any]] | None = None
    for turn, names in enumerate(turns):
        if wrong_at in names:
            before_wrong = list(messages)
        reply = " ".join(ideal[n].strip() for n in names)
        advance = await walk.advance(messages, [{"role": "assistant", "content": reply}], turn)
        messages.append({"role": "assistant", "content": reply})
        if advance.done:
            break
        messages.append({"role": "user", "content": "\n\n".join(advance.reveals)})
    result = walk.result
    failed = [f"{r.name} judged {r.answer!r}, truth {r.truth!r}" for r in result.results if not r.correct]
    if failed or result.stop_reason != StopReason.TERMINAL or set(result.path) != set(item.answers):
        detail = "; ".join(failed) or f"the walk ended {result.stop_reason} on {result.path}"
        raise CheckError("regrade_ideal_failed", f"the ideal replies fail their own path: {detail}")
    summary: dict[str, Any] = {"turns": len(turns), "ideal_path": result.path}
    if wrong_at and wrong_reply is not None:
        req = rubric.graph.requirements[wrong_at]
        judge = rubric.judges[req.judge or rubric.default_judge]
        truth = scenario.answers[wrong_at]
        verdict = await judge.judge_for(req)(
            before_wrong or messages, [{"role": "assistant", "content": wrong_reply}], truth
        )
        answer = req.validate_answer(verdict.answer) if verdict.answer is not None else None
        if answer is not None and req.is_correct(answer, truth["answer"]):
            raise CheckError(
                "regrade_wrong_passed",
                f"the wrong reply at {wrong_at!r} is judged correct ({answer!r}): the judge cannot tell the "
                "branches apart",
            )
        summary["wrong_judged"] = {"requirement": wrong_at, "answer": answer}
    return summary


def _as_messages(prompt: Messages | str) -> list[dict[str, Any]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [dict(m) for m in prompt]
