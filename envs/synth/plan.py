"""The plan: which ground-truth path each synthetic scenario must follow, so that every branch is covered.

A scenario's answers decide its walk through the rubric (``ground_truth_walk``): from the roots, each
answered requirement unlocks the requirements of its answer. A **route** is one such walk, written as the
answer of every requirement it reaches. Routes are enumerated depth first with an explicit stack, branching
only where answers route differently (answers that unlock the same requirements form one *branch*; which
of them a scenario gets is rotated so that every answer value is used), and bounded by ``max_routes``.

``make_plan`` picks ``n`` routes: first a greedy cover of every branch key (requirement, answer group),
then the rest drawn with the seeded generator, uniform over routes (``weighting="uniform"``) or towards the
least-used branches (``"balanced"``). Every item gets a stable id from its index and route; the plan is
saved as JSON and is the unit of resume.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from rubrics.multistep.dag import Graph
from rubrics.multistep.requirements import (
    Answer,
    ContinuousRequirement,
    DiscreteRequirement,
    Requirement,
    UnitVectorRequirement,
)

Weighting = Literal["uniform", "balanced"]
PLAN_VERSION = 1


@dataclass(frozen=True)
class Branch:
    """Answers of one requirement that unlock the same requirements."""

    requirement: str
    """The requirement."""
    answers: tuple[Any, ...]
    """Its answers in this branch (canonical form), in domain order."""
    unlocks: tuple[str, ...]
    """What any of them unlocks (empty: the branch ends here)."""

    @property
    def key(self) -> str:
        """``requirement=answer|answer``: the branch key counted by coverage."""
        return f"{self.requirement}={'|'.join(answer_label(a) for a in self.answers)}"


@dataclass
class PlannedItem:
    """One scenario to generate."""

    id: str
    """Stable id: the index and a hash of the route (resume and file names use it)."""
    index: int
    """Position in the plan."""
    answers: dict[str, Any]
    """The route: requirement -> the ground-truth answer this scenario must have, in walk order."""
    wrong: dict[str, Any] = field(default_factory=dict)
    """The branching point for re-grading: ``{"requirement": name, "answer": a wrong answer}`` (empty when
    no requirement on the route has a second answer)."""

    @property
    def path(self) -> list[str]:
        """The requirements the route reaches, in walk order."""
        return list(self.answers)


@dataclass
class Plan:
    """Everything the pipeline will generate, and how it was chosen."""

    rubric_hash: str
    """Hash of the rubric's plain data (a resumed run must use the same rubric)."""
    n: int
    """Items asked for."""
    seed: int
    """Seed of the draw."""
    weighting: str
    """``uniform`` over routes, or ``balanced`` over branches."""
    routes_total: int
    """Routes enumerated (at most ``max_routes``)."""
    routes_truncated: bool
    """Whether enumeration stopped at ``max_routes``."""
    branch_keys: list[str]
    """Every branch key of the enumerated routes."""
    items: list[PlannedItem]
    """The items, in order."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON)."""
        return {"version": PLAN_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        """Inverse of ``to_dict``."""
        if data.get("version") != PLAN_VERSION:
            raise ValueError(f"plan version {data.get('version')!r}; this code reads {PLAN_VERSION}")
        fields = {k: v for k, v in data.items() if k != "version"}
        fields["items"] = [PlannedItem(**item) for item in data["items"]]
        return cls(**fields)


def answer_label(answer: Any) -> str:
    """A short text for an answer: ``1``, ``0.5``, or the top index of a vector as ``#2``."""
    if isinstance(answer, list):
        return f"#{max(range(len(answer)), key=lambda i: (answer[i], -i))}"
    number = float(answer)
    return str(int(number)) if number.is_integer() else repr(number)


def domain(req: Requirement) -> list[Answer]:
    """The answers a plan may give ``req``: every option (binary, discrete), the dependency keys or the
    bounds (continuous), a one-hot vector per label (unit vector)."""
    if isinstance(req, DiscreteRequirement):
        return list(req.options)
    if isinstance(req, ContinuousRequirement):
        keys = sorted(req.dependencies) or sorted({req.low, req.high})
        return [float(k) for k in keys]
    if isinstance(req, UnitVectorRequirement):
        size = len(req.labels)
        return [[1.0 if i == j else 0.0 for i in range(size)] for j in range(size)]
    return [0.0, 1.0]


def branches(req: Requirement) -> list[Branch]:
    """``req``'s domain grouped by what each answer unlocks, in domain order."""
    groups: dict[tuple[str, ...], list[Any]] = {}
    for answer in domain(req):
        groups.setdefault(tuple(req.route(answer)), []).append(answer)
    return [Branch(req.name, tuple(answers), unlocks) for unlocks, answers in groups.items()]


def enumerate_routes(graph: Graph, max_routes: int = 10_000) -> tuple[list[list[Branch]], bool]:
    """Every route as its branches in walk order, at most ``max_routes``; and whether that bound cut it."""
    order = {name: (graph.levels[name], i) for i, name in enumerate(graph.requirements)}
    choices = {name: branches(req) for name, req in graph.requirements.items()}
    routes: list[list[Branch]] = []
    stack: list[list[Branch]] = [[]]
    truncated = False
    while stack:
        partial = stack.pop()
        nxt = _next_unanswered(graph, partial, order)
        if nxt is None:
            if len(routes) >= max_routes:
                truncated = True
                break
            routes.append(partial)
            continue
        stack.extend([*partial, b] for b in reversed(choices[nxt]))
    return routes, truncated


def _next_unanswered(graph: Graph, partial: list[Branch], order: Mapping[str, tuple[int, int]]) -> str | None:
    """The first requirement (by level, then definition) the partial route reaches but has not answered."""
    answered = {b.requirement for b in partial}
    reached = set(graph.roots)
    for b in partial:
        reached.update(b.unlocks)
    waiting = [n for n in reached if n not in answered]
    return min(waiting, key=order.__getitem__) if waiting else None


def make_plan(
    graph: Graph,
    rubric_data: Mapping[str, Any],
    n: int,
    seed: int = 0,
    weighting: Weighting = "uniform",
    max_routes: int = 10_000,
) -> Plan:
    """``n`` items covering every branch key when ``n`` allows (see the module docstring)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if weighting not in ("uniform", "balanced"):
        raise ValueError(f"weighting must be 'uniform' or 'balanced', got {weighting!r}")
    routes, truncated = enumerate_routes(graph, max_routes)
    rng = random.Random(seed)
    keys = [{b.key for b in route} for route in routes]
    all_keys = sorted(set().union(*keys))
    chosen = _greedy_cover(keys)[:n]
    used: Counter[str] = Counter(k for i in chosen for k in keys[i])
    while len(chosen) < n:
        if weighting == "uniform":
            pick = rng.randrange(len(routes))
        else:
            pick = min(range(len(routes)), key=lambda i: (sum(used[k] for k in keys[i]) / len(keys[i]), i))
        chosen.append(pick)
        used.update(keys[pick])
    rng.shuffle(chosen)
    items = _assign_answers([routes[i] for i in chosen], graph)
    return Plan(
        rubric_hash=rubric_hash(rubric_data),
        n=n,
        seed=seed,
        weighting=weighting,
        routes_total=len(routes),
        routes_truncated=truncated,
        branch_keys=all_keys,
        items=items,
    )


def _greedy_cover(keys: list[set[str]]) -> list[int]:
    """Route indices that together cover every branch key: each time the route adding the most new keys."""
    todo = set().union(*keys)
    picked: list[int] = []
    while todo:
        best = max(range(len(keys)), key=lambda i: (len(keys[i] & todo), -i))
        picked.append(best)
        todo -= keys[best]
    return picked


def _assign_answers(routes: list[list[Branch]], graph: Graph) -> list[PlannedItem]:
    """Concrete answers for each route: within a branch the least-used answer so far (ties: domain order);
    the wrong answer (re-grading's branching point) is the least-used (requirement, answer of another
    branch) pair on the route, so the check moves along the route over the plan."""
    used: Counter[tuple[str, str]] = Counter()
    items = []
    for index, route in enumerate(routes):
        answers: dict[str, Any] = {}
        for b in route:
            counts = [used[(b.requirement, answer_label(a))] for a in b.answers]
            answer = b.answers[counts.index(min(counts))]
            used[(b.requirement, answer_label(answer))] += 1
            answers[b.requirement] = answer
        candidates = [
            (b.requirement, a)
            for b in route
            for br in branches(graph.requirements[b.requirement])
            if br != b
            for a in br.answers
        ]
        wrong: dict[str, Any] = {}
        if candidates:
            req, pick = min(candidates, key=lambda c: used[(c[0], "wrong " + answer_label(c[1]))])
            used[(req, "wrong " + answer_label(pick))] += 1
            wrong = {"requirement": req, "answer": pick}
        digest = hashlib.sha256(json.dumps(answers, sort_keys=True).encode()).hexdigest()[:8]
        items.append(PlannedItem(id=f"{index:05d}-{digest}", index=index, answers=answers, wrong=wrong))
    return items


def rubric_hash(rubric_data: Mapping[str, Any]) -> str:
    """A short hash of a rubric's plain data."""
    return hashlib.sha256(json.dumps(rubric_data, sort_keys=True, default=str).encode()).hexdigest()[:16]
