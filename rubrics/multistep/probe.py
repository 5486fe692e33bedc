"""The rubric probe: what a rubric pays policies that know nothing about the task.

A reward that a trivial policy earns is not evidence of learning. ``probe`` plays each scenario with
scripted policies through the same progressive-reveal walk a model gets (one reply per turn, a revealed
text as the next user message, up to ``max_turns`` replies) and scores them with the rubric's own judges
and reward strategy:

- ``empty``: says nothing;
- ``echo``: repeats the last thing it was told (the dispatch, then each revealed text);
- ``majority``: at every requirement, asserts the answer most scenarios have (the phrase its rule judge
  looks for), every turn: the policy that wins an unbalanced scenario set;
- ``every_phrase``: lists every phrase any rule judge looks for, for every answer;
- ``ideal`` (the ceiling, not a trivial policy): asserts the ground truth of each requirement it is asked
  about, with the rule judge's own phrase.

The phrase policies need rule judges: a requirement judged by an LLM has no phrase to say, so those
policies say nothing about it. ``score_rollouts`` gives every row, the trained model's included, the
same statistics: the mean reward with a 95% interval clustered by scenario (``rubrics.intervals``), pass rates
per requirement and per level, and the accuracy of each root per branch of its ground truth (for
first_responder: safe scenes and unsafe ones separately).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rubrics.intervals import clustered_mean_ci
from rubrics.multistep.requirements import Requirement
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.scenario import Scenario
from rubrics.multistep.walk import Walk, truth_of
from rubrics.types import RequirementResult


@dataclass(frozen=True)
class ProbeRollout:
    """What the statistics need of one rollout: a scripted policy's (``play``), or a view of a model's
    evaluated rollout (``envs.rollout.ScoredRollout.for_probe``)."""

    scenario: str
    """The scenario played (the cluster of the interval)."""
    reward: float
    """The rubric's reward."""
    results: list[RequirementResult]
    """The walk's verdicts (empty without a requirement DAG)."""


@dataclass
class PolicyScore:
    """One row of the probe table (a policy, or a model's evaluation)."""

    policy: str
    """Its name."""
    rollouts: int = 0
    """Rollouts scored."""
    scenarios: int = 0
    """Distinct scenarios among them (the clusters)."""
    reward_mean: float = math.nan
    """Mean reward."""
    reward_ci95: float = math.nan
    """Half-width of the 95% interval of the mean, clustered by scenario."""
    pass_rates: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per requirement: (judged correct, judged)."""
    level_pass_rates: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Per level of the DAG: (judged correct, judged)."""
    root_accuracy: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per root and ground-truth branch (``scene_safety=0.0``): (judged correct, rollouts)."""
    scenario_rewards: dict[str, float] = field(default_factory=dict)
    """Mean reward per scenario (for paired comparisons, ``paired_difference``)."""

    def as_dict(self) -> dict[str, Any]:
        """Plain data (JSON)."""
        return {
            "policy": self.policy,
            "rollouts": self.rollouts,
            "scenarios": self.scenarios,
            "reward_mean": self.reward_mean,
            "reward_ci95": self.reward_ci95,
            "pass_rates": {k: list(v) for k, v in self.pass_rates.items()},
            "level_pass_rates": {str(k): list(v) for k, v in self.level_pass_rates.items()},
            "root_accuracy": {k: list(v) for k, v in self.root_accuracy.items()},
            "scenario_rewards": dict(self.scenario_rewards),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PolicyScore:
        """Back from ``as_dict``."""
        return cls(
            policy=str(data["policy"]),
            rollouts=int(data["rollouts"]),
            scenarios=int(data["scenarios"]),
            reward_mean=float(data["reward_mean"]),
            reward_ci95=float(data["reward_ci95"]),
            pass_rates={k: (int(v[0]), int(v[1])) for k, v in data.get("pass_rates", {}).items()},
            level_pass_rates={
                int(k): (int(v[0]), int(v[1])) for k, v in data.get("level_pass_rates", {}).items()
            },
            root_accuracy={k: (int(v[0]), int(v[1])) for k, v in data.get("root_accuracy", {}).items()},
            scenario_rewards={k: float(v) for k, v in data.get("scenario_rewards", {}).items()},
        )


def score_rollouts(policy: str, rollouts: Sequence[ProbeRollout], roots: Sequence[str]) -> PolicyScore:
    """The statistics of one policy's (or model's) rollouts; ``roots`` are the rubric's roots."""
    mean, ci = clustered_mean_ci([r.reward for r in rollouts], [r.scenario for r in rollouts])
    score = PolicyScore(policy, len(rollouts), len({r.scenario for r in rollouts}), mean, ci)
    passes: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    levels: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    branches: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for rollout in rollouts:
        for result in rollout.results:
            ok = int(result.correct)
            for tally in (passes[result.name], levels[result.level]):
                tally[0] += ok
                tally[1] += 1
            if result.name in roots:
                branch = branches[f"{result.name}={result.truth}"]
                branch[0] += ok
                branch[1] += 1
    score.pass_rates = {k: (v[0], v[1]) for k, v in sorted(passes.items())}
    score.level_pass_rates = {k: (v[0], v[1]) for k, v in sorted(levels.items())}
    score.root_accuracy = {k: (v[0], v[1]) for k, v in sorted(branches.items())}
    per_scenario: dict[str, list[float]] = defaultdict(list)
    for rollout in rollouts:
        per_scenario[rollout.scenario].append(rollout.reward)
    score.scenario_rewards = {k: math.fsum(v) / len(v) for k, v in sorted(per_scenario.items())}
    return score


def paired_difference(a: PolicyScore, b: PolicyScore) -> tuple[float, float, int]:
    """``a``'s mean reward minus ``b``'s over the scenarios both played, paired by scenario: the mean of
    the per-scenario differences, the half-width of its 95% interval, and the number of scenarios.

    The interval is ``clustered_mean_ci`` with one difference per scenario, each its own cluster: the
    cluster-robust error then is the ordinary paired t-interval's, ``sqrt(sum (d - mean)^2 / (N (N - 1)))``
    on N - 1 degrees of freedom. NaN half-width below two scenarios (NaN mean with none)."""
    common = sorted(set(a.scenario_rewards) & set(b.scenario_rewards))
    diffs = [a.scenario_rewards[k] - b.scenario_rewards[k] for k in common]
    mean, half = clustered_mean_ci(diffs, common)
    return mean, half, len(diffs)


# -- the scripted policies ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """What a scripted policy sees before its reply."""

    scenario: Scenario
    """The scenario played (``ideal`` reads its ground truth; the trivial policies do not)."""
    turn: int
    """1 for the first reply."""
    told: str
    """The last user message: the dispatch, then the revealed texts."""
    asked: Sequence[str]
    """The requirements this reply is judged on (the walk's frontier)."""


Policy = Callable[[Turn], str]
"""A scripted policy: the reply for a turn."""


def asserting_phrases(requirement: Requirement, answer: Any) -> list[str]:
    """The words that make ``requirement``'s rule judge answer ``answer``: every ``all`` phrase and the first
    ``any`` phrase of that answer's rule (empty when it has no rule, e.g. an LLM-judged requirement)."""
    spec = _rule_for(requirement, answer)
    if spec is None:
        return []
    any_phrases = list(spec.get("any", []))
    return [*spec.get("all", []), *any_phrases[:1]]


def _rule_for(requirement: Requirement, answer: Any) -> Mapping[str, Any] | None:
    for key, spec in requirement.rules.items():
        try:
            if requirement.is_correct(requirement.validate_answer(key), answer):
                return dict(spec)
        except (TypeError, ValueError):
            continue
    return None


def _sentences(phrases: Sequence[str]) -> str:
    return " ".join(f"{p[:1].upper()}{p[1:]}." for p in phrases)


def majority_answers(rubric: MultiStepRubric, scenarios: Sequence[Scenario]) -> dict[str, Any]:
    """Each requirement's most common ground-truth answer over ``scenarios`` (ties: the first seen)."""
    counts: dict[str, Counter[Any]] = defaultdict(Counter)
    firsts: dict[str, dict[str, Any]] = defaultdict(dict)  # answers by repr (lists are not hashable)
    for scenario in scenarios:
        for name in rubric.graph.requirements:
            truth = truth_of(scenario.answers, name)
            if truth is not None:
                key = repr(truth["answer"])
                counts[name][key] += 1
                firsts[name].setdefault(key, truth["answer"])
    return {name: firsts[name][c.most_common(1)[0][0]] for name, c in counts.items()}


def trivial_policies(rubric: MultiStepRubric, scenarios: Sequence[Scenario]) -> dict[str, Policy]:
    """The probe's policies by name: the trivial ones, then ``ideal`` (the ceiling)."""
    requirements = rubric.graph.requirements
    majority = majority_answers(rubric, scenarios)
    majority_reply = _sentences(
        [p for name, answer in majority.items() for p in asserting_phrases(requirements[name], answer)]
    )
    every = [
        p
        for req in requirements.values()
        for spec in req.rules.values()
        for key in ("all", "any")
        for p in spec.get(key, [])
    ]
    every_reply = _sentences(list(dict.fromkeys(every)))

    def ideal(turn: Turn) -> str:
        phrases = []
        for name in turn.asked:  # the frontier's truth, and what it unlocks on the same reply
            phrases += _truth_phrases(rubric, turn.scenario, name)
        return _sentences(list(dict.fromkeys(phrases)))

    return {
        "empty": lambda turn: "",
        "echo": lambda turn: turn.told,
        "majority": lambda turn: majority_reply,
        "every_phrase": lambda turn: every_reply,
        "ideal": ideal,
    }


def _truth_phrases(rubric: MultiStepRubric, scenario: Scenario, name: str) -> list[str]:
    """The phrases of ``name``'s ground truth and, for those unlocked on the same reply, theirs (depth
    first)."""
    phrases: list[str] = []
    todo, seen = [name], set[str]()
    while todo:
        current = todo.pop(0)
        truth = truth_of(scenario.answers, current)
        if current in seen or truth is None:
            continue
        seen.add(current)
        requirement = rubric.graph.requirements[current]
        phrases += asserting_phrases(requirement, truth["answer"])
        if current not in scenario.revealed_info:  # a revealed text makes the rest wait for the next reply
            todo += requirement.route(truth["answer"])
    return phrases


async def converse(
    rubric: MultiStepRubric, scenario: Scenario, policy: Policy, max_turns: int
) -> tuple[list[dict[str, Any]], Walk]:
    """Play ``policy`` through the rubric's walk of ``scenario`` as the progressive-reveal environment does:
    a reply per turn, judged on the walk's frontier, the revealed texts told back as the next user message.
    Returns the conversation (the dispatch first, no system message) and the finished walk."""
    walk = rubric.walk(scenario.answers, scenario.revealed_info)
    told = scenario.prompt if isinstance(scenario.prompt, str) else str(scenario.prompt[-1]["content"])
    messages: list[dict[str, Any]] = [{"role": "user", "content": told}]
    for turn in range(1, max_turns + 1):
        reply = policy(Turn(scenario, turn, told, list(walk.frontier)))
        messages.append({"role": "assistant", "content": reply})
        step = await walk.advance(messages[:-1], messages[-1:], turn)
        if step.done or not step.reveals:
            break
        told = "\n\n".join(step.reveals)
        messages.append({"role": "user", "content": told})
    return messages, walk


async def play(rubric: MultiStepRubric, scenario: Scenario, policy: Policy, max_turns: int) -> ProbeRollout:
    """One scripted rollout (``converse``), scored."""
    _, walk = await converse(rubric, scenario, policy, max_turns)
    result = walk.result
    return ProbeRollout(scenario.name, rubric.reward(result, scenario.answers), result.results)


def scripted(replies: Sequence[str]) -> Policy:
    """A policy that says ``replies`` in order (nothing once they run out): a demonstration's turns."""
    return lambda turn: replies[turn.turn - 1] if turn.turn <= len(replies) else ""


async def demonstration(
    rubric: MultiStepRubric, scenario: Scenario, policy: Policy, max_turns: int
) -> dict[str, Any]:
    """``policy``'s conversation of ``scenario`` (``converse``) with its reward, as the trainer's warm start
    reads a demonstration: ``{"scenario", "reward", "messages"}``."""
    messages, walk = await converse(rubric, scenario, policy, max_turns)
    reward = rubric.reward(walk.result, scenario.answers)
    return {"scenario": scenario.name, "reward": reward, "messages": messages}


async def ideal_demonstrations(
    rubric: MultiStepRubric, scenarios: Sequence[Scenario], max_turns: int
) -> list[dict[str, Any]]:
    """The ``ideal`` policy's ``demonstration`` of each scenario: demonstrations for a rubric whose scenarios
    have no hand-written ideal replies. Its replies are the rule judges' own phrases, terse but judged
    correct."""
    ideal = trivial_policies(rubric, scenarios)["ideal"]
    return [await demonstration(rubric, scenario, ideal, max_turns) for scenario in scenarios]


async def probe(
    rubric: MultiStepRubric,
    scenarios: Sequence[Scenario],
    max_turns: int,
    policies: Mapping[str, Policy] | None = None,
    majority_from: Sequence[Scenario] | None = None,
) -> list[PolicyScore]:
    """Score every policy (default: ``trivial_policies``, their majority taken over ``majority_from``, by
    default the scenarios played) on every scenario; one row per policy."""
    policies = policies or trivial_policies(rubric, majority_from or scenarios)
    rows = []
    for name, policy in policies.items():
        rollouts = [await play(rubric, s, policy, max_turns) for s in scenarios]
        rows.append(score_rollouts(name, rollouts, rubric.roots))
    return rows


def format_table(rows: Sequence[PolicyScore]) -> list[str]:
    """A markdown table: reward with its clustered interval, then each root's accuracy per branch."""
    branches = sorted({b for row in rows for b in row.root_accuracy})
    levels = sorted({lv for row in rows for lv in row.level_pass_rates})
    header = ["policy", "reward ± 95% CI (clustered)", *branches, *(f"level {lv} passed" for lv in levels)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [
            row.policy,
            f"{row.reward_mean:.3f} ± {row.reward_ci95:.3f} ({row.rollouts} on {row.scenarios})",
        ]
        cells += [_rate(row.root_accuracy.get(b)) for b in branches]
        cells += [_rate(row.level_pass_rates.get(lv)) for lv in levels]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _rate(tally: tuple[int, int] | None) -> str:
    return "-" if not tally else f"{tally[0]}/{tally[1]}"
