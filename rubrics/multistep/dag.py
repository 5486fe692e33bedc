"""The requirement DAG: validation, roots, topological levels and root-to-terminal paths.

Nothing here recurses: cycle detection, levels and path enumeration walk with explicit stacks and queues, so
a valid chain of thousands of requirements validates and a cycle that long is reported (its path shortened
to a readable excerpt). Path enumeration is bounded; ``Graph.count_paths`` counts them without listing.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rubrics.multistep.requirements import Requirement

logger = logging.getLogger(__name__)


class RubricValidationError(ValueError):
    """A multi-step rubric is malformed; the message names the requirement and the field."""


@dataclass(frozen=True)
class Graph:
    """A validated DAG of requirements."""

    requirements: dict[str, Requirement]
    """Requirements by name, in definition order."""
    roots: tuple[str, ...]
    """Where evaluation starts: declared roots, or every requirement nothing depends on."""
    levels: dict[str, int]
    """Topological level of each requirement: the longest dependency chain from a root (roots are 0)."""
    unreachable: tuple[str, ...]
    """Requirements no root can reach (a warning, not an error)."""

    def by_level(self) -> list[list[str]]:
        """Requirement names grouped by level, level 0 first."""
        out: list[list[str]] = [[] for _ in range(max(self.levels.values(), default=-1) + 1)]
        for name, level in self.levels.items():
            out[level].append(name)
        return out

    def paths(self, limit: int = 10_000) -> list[list[str]]:
        """Root-to-terminal paths (a path ends where a requirement unlocks nothing), depth first in definition
        order, at most ``limit`` of them (``count_paths`` says how many there are)."""
        found: list[list[str]] = []
        stack = [[root] for root in reversed(self.roots)]
        while stack and len(found) < limit:
            path = stack.pop()
            children = self.requirements[path[-1]].children()
            if not children:
                found.append(path)
            stack.extend([*path, child] for child in reversed(children))
        return found

    def count_paths(self) -> int:
        """How many root-to-terminal paths there are (counted, not listed: a wide DAG has millions)."""
        count: dict[str, int] = {}
        for name in reversed(_topological_order(self.requirements)):
            children = self.requirements[name].children()
            count[name] = sum(count[c] for c in children) if children else 1
        return sum(count[root] for root in self.roots)

    @property
    def depth(self) -> int:
        """Number of levels."""
        return max(self.levels.values(), default=-1) + 1


def build_graph(requirements: Sequence[Requirement], roots: Sequence[str] | None = None) -> Graph:
    """Validate ``requirements`` as a DAG; raise ``RubricValidationError`` naming what is wrong."""
    if not requirements:
        raise RubricValidationError("a multi-step rubric needs at least one requirement")
    by_name: dict[str, Requirement] = {}
    for i, req in enumerate(requirements):
        if not isinstance(req, Requirement):
            raise RubricValidationError(f"requirements[{i}] is {type(req).__name__}, not a Requirement")
        if req.name in by_name:
            raise RubricValidationError(
                f"requirement {req.name!r}: field 'name' is duplicated (requirements[{i}])"
            )
        by_name[req.name] = req
    for req in by_name.values():
        for key, names in req.dependencies.items():
            for n in names:
                if n not in by_name:
                    raise RubricValidationError(
                        f"requirement {req.name!r}: field 'dependencies' ({key!r}) names unknown "
                        f"requirement {n!r}"
                    )
                if n == req.name:
                    raise RubricValidationError(
                        f"requirement {req.name!r}: field 'dependencies' ({key!r}) names itself "
                        f"(cycle: {n} -> {n})"
                    )
    _reject_cycles(by_name)

    has_parent = {child for req in by_name.values() for child in req.children()}
    if roots:
        for r in roots:
            if r not in by_name:
                raise RubricValidationError(f"field 'roots' names unknown requirement {r!r}")
            if r in has_parent:
                raise RubricValidationError(f"field 'roots': requirement {r!r} is unlocked by another one")
        root_names = tuple(roots)
    else:
        root_names = tuple(n for n in by_name if n not in has_parent)

    reachable = _reachable(by_name, root_names)
    unreachable = tuple(n for n in by_name if n not in reachable)
    if unreachable:
        logger.warning("requirements unreachable from the roots %s: %s", list(root_names), list(unreachable))
    return Graph(requirements=by_name, roots=root_names, levels=_levels(by_name), unreachable=unreachable)


def _reject_cycles(by_name: dict[str, Requirement]) -> None:
    """Depth-first search with an explicit stack; the first cycle found is reported with its path."""
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(by_name, white)
    for start in by_name:
        if color[start] != white:
            continue
        color[start] = grey
        path = [start]
        stack: list[Iterator[str]] = [iter(by_name[start].children())]
        while stack:
            child = next(stack[-1], None)
            if child is None:
                stack.pop()
                color[path.pop()] = black
                continue
            if color[child] == grey:
                cycle = [*path[path.index(child) :], child]
                raise RubricValidationError(
                    f"requirement {path[-1]!r}: field 'dependencies' closes a cycle: {_excerpt(cycle)}"
                )
            if color[child] == white:
                color[child] = grey
                path.append(child)
                stack.append(iter(by_name[child].children()))


def _excerpt(cycle: list[str], keep: int = 4) -> str:
    """``a -> b -> ... -> a``; a long cycle as its first and last ``keep`` steps and its length."""
    if len(cycle) <= 2 * keep + 1:
        return " -> ".join(cycle)
    return (
        f"{' -> '.join(cycle[:keep])} -> ... -> {' -> '.join(cycle[-keep:])} ({len(cycle) - 1} requirements)"
    )


def _reachable(by_name: dict[str, Requirement], roots: Sequence[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(by_name[name].children())
    return seen


def _topological_order(by_name: dict[str, Requirement]) -> list[str]:
    """Kahn's order: every requirement after all the requirements that unlock it."""
    indegree = dict.fromkeys(by_name, 0)
    for req in by_name.values():
        for child in req.children():
            indegree[child] += 1
    queue = deque(n for n in by_name if indegree[n] == 0)
    order: list[str] = []
    while queue:
        name = queue.popleft()
        order.append(name)
        for child in by_name[name].children():
            indegree[child] -= 1
            if indegree[child] == 0:
                queue.append(child)
    return order


def _levels(by_name: dict[str, Requirement]) -> dict[str, int]:
    """Longest distance from a parentless requirement, in Kahn's order."""
    level = dict.fromkeys(by_name, 0)
    for name in _topological_order(by_name):
        for child in by_name[name].children():
            level[child] = max(level[child], level[name] + 1)
    return {n: level[n] for n in by_name}
