"""``MultiStepRubric``: a DAG of requirements, judges, and a reward strategy, usable as a ``Rubric``.

Scoring a rollout reads the scenario's ground truth from its ``answer`` (requirement name ->
``{"answer", "reasoning"}``) and the reply from its ``completion``. When an environment already judged the
rollout turn by turn it leaves the verdicts in ``rollout.multistep`` (an ``EvaluationResult``; a hand-built
state's ``state["multistep"]``) and nothing is judged twice. The reward compares them with the scenario's
ideal walk, computed once per scenario (``MultiStepRubric.ideal_walk``). Metrics: ``req/<name>`` (1.0 correct,
0.0 incorrect) for every judged requirement, ``depth``, ``path_length`` and ``stop/<reason>``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from rubrics.judges.matching import check_rule_spec
from rubrics.multistep.dag import Graph, RubricValidationError, build_graph
from rubrics.multistep.judging import RequirementJudge
from rubrics.multistep.requirements import Requirement
from rubrics.multistep.scenario import Scenario
from rubrics.multistep.strategies import RewardStrategy
from rubrics.multistep.walk import EvaluationResult, Walk, evaluate, ground_truth_walk
from rubrics.rubric import RewardWithMetrics, Rubric
from rubrics.types import Messages, Rollout


class MultiStepRubric(Rubric):
    """Requirements wired as a DAG whose next steps depend on the judged answer."""

    def __init__(
        self,
        requirements: Sequence[Requirement],
        judges: Mapping[str, RequirementJudge] | Sequence[RequirementJudge],
        reward_strategy: RewardStrategy | str | Mapping[str, Any] = "level_weighted",
        default_judge: str | None = None,
        roots: Sequence[str] | None = None,
        name: str = "",
        description: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.name = name
        """The rubric's name."""
        self.description = description
        """What the rubric evaluates."""
        self.graph: Graph = build_graph(requirements, roots)
        """The validated DAG."""
        self.declared_roots = list(roots) if roots else None
        self.judges: dict[str, RequirementJudge] = _judges_by_name(judges)
        """Judges by name."""
        if default_judge is not None and default_judge not in self.judges:
            raise RubricValidationError(f"field 'default_judge' names unknown judge {default_judge!r}")
        self.default_judge: str = default_judge or next(iter(self.judges))
        """The judge of requirements that name none."""
        self.reward_strategy = (
            reward_strategy
            if isinstance(reward_strategy, RewardStrategy)
            else RewardStrategy.from_dict(reward_strategy)
        )
        """How verdicts become one reward."""
        self._ideal: dict[Hashable, EvaluationResult] = {}
        """Ideal walks computed so far, by ground truth (``ideal_walk``)."""
        self._check_judges()
        self.add_reward_func(self.multistep_reward)

    def _check_judges(self) -> None:
        for req in self.graph.requirements.values():
            judge_name = req.judge or self.default_judge
            if judge_name not in self.judges:
                raise RubricValidationError(
                    f"requirement {req.name!r}: field 'judge' names unknown judge {judge_name!r} "
                    f"(configured: {', '.join(self.judges)})"
                )
            reason = self.judges[judge_name].cannot_answer(req)
            if reason is not None:
                raise RubricValidationError(
                    f"requirement {req.name!r}: field 'judge': judge {judge_name!r} cannot answer this "
                    f"{req.kind} requirement: {reason}"
                )
            for key, spec in req.rules.items():
                try:
                    check_rule_spec(req.name, key, spec)
                except ValueError as exc:
                    raise RubricValidationError(str(exc)) from exc

    # -- the DAG -------------------------------------------------------------------------------------

    @property
    def requirements(self) -> list[Requirement]:
        """The requirements, in definition order."""
        return list(self.graph.requirements.values())

    @property
    def roots(self) -> list[str]:
        """Where evaluation starts."""
        return list(self.graph.roots)

    @property
    def levels(self) -> list[list[str]]:
        """Requirement names by topological level."""
        return self.graph.by_level()

    def paths(self) -> list[list[str]]:
        """Every root-to-terminal path."""
        return self.graph.paths()

    # -- evaluation ----------------------------------------------------------------------------------

    def walk(self, answers: Mapping[str, Any], reveals: Mapping[str, str] | None = None) -> Walk:
        """A fresh walk for one rollout: ``answers`` is the scenario's ground truth, ``reveals`` its
        ``revealed_info`` (environments advance it one reply per turn; see ``Walk.advance``)."""
        return Walk(self.graph, self.judges, self.default_judge, answers, reveals)

    async def evaluate(
        self,
        answers: Mapping[str, Any] | Scenario,
        completion: Messages | str,
        prompt: Messages | str | None = None,
    ) -> EvaluationResult:
        """Walk the DAG over one reply."""
        if isinstance(answers, Scenario):
            prompt = answers.prompt if prompt is None else prompt
            answers = answers.answers
        return await evaluate(self.graph, self.judges, self.default_judge, answers, prompt, completion)

    def ideal_walk(self, answers: Mapping[str, Any]) -> EvaluationResult:
        """The scenario's ideal walk (``ground_truth_walk``), computed once per distinct ground truth and
        kept: every rollout of a scenario is rewarded against the same one. Treat it as read-only."""
        key = _frozen(answers)
        ideal = self._ideal.get(key)
        if ideal is None:
            ideal = self._ideal[key] = ground_truth_walk(self.graph, answers)
        return ideal

    def reward(self, result: EvaluationResult, answers: Mapping[str, Any]) -> float:
        """The strategy's reward for a walk, against the scenario's ideal walk."""
        return self.reward_strategy(result.results, self.ideal_walk(answers).results)

    async def multistep_reward(
        self, prompt: Messages | str, completion: Messages | str, answer: Any, rollout: Rollout
    ) -> RewardWithMetrics:
        """The reward function this rubric registers: evaluate (or reuse the environment's verdicts)."""
        if not isinstance(answer, Mapping):
            raise ValueError("state['answer'] must map requirement names to ground-truth answers")
        result = rollout.multistep
        if result is None:
            result = rollout.multistep = await self.evaluate(answer, completion, prompt)
        metrics = {f"req/{r.name}": 1.0 if r.correct else 0.0 for r in result.results}
        metrics["depth"] = float(result.depth)
        metrics["path_length"] = float(len(result.path))
        metrics[f"stop/{result.stop_reason}"] = 1.0
        return RewardWithMetrics(self.reward(result, answer), metrics)


def _frozen(value: Any) -> Hashable:
    """A hashable copy of plain data (mappings, lists, scalars): the key of a ground truth."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value if isinstance(value, Hashable) else repr(value)


def _judges_by_name(
    judges: Mapping[str, RequirementJudge] | Sequence[RequirementJudge],
) -> dict[str, RequirementJudge]:
    if isinstance(judges, Mapping):
        out = dict(judges)
    else:
        out = {}
        for i, judge in enumerate(judges):
            name = getattr(judge, "name", None)
            if not isinstance(name, str) or not name:
                raise RubricValidationError(f"judges[{i}] has no name")
            if name in out:
                raise RubricValidationError(f"judges[{i}]: judge name {name!r} is duplicated")
            out[name] = judge
    if not out:
        raise RubricValidationError(
            "a multi-step rubric needs at least one judge (e.g. a RuleRequirementJudge or an LLM judge)"
        )
    for name, judge in out.items():
        if not isinstance(judge, RequirementJudge):
            raise RubricValidationError(f"judge {name!r} is {type(judge).__name__}, not a requirement judge")
    return out
