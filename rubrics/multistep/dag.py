"""The requirement DAG: validation, roots, topological levels and root-to-terminal paths."""

from __future__ import annotations

import logging
from collections.abc import Sequence
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
        """Every root-to-terminal path (a path ends where a requirement unlocks nothing)."""
        found: list[list[str]] = []

        def walk(name: str, path: list[str]) -> None:
            if len(found) >= limit:
                return
            children = self.requirements[name].children()
            if not children:
                found.append(path)
            for child in children:
                walk(child, [*path, child])

        for root in self.roots:
            walk(root, [root])
        return found

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
                        f"requirement {req.name!r}: field 'dependencies' ({key!r}) names unknown requirement {n!r}"
                    )
                if n == req.name:
                    raise RubricValidationError(
                        f"requirement {req.name!r}: field 'dependencies' ({key!r}) names itself (cycle: {n} -> {n})"
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
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(by_name, white)
    stack: list[str] = []

    def visit(name: str) -> None:
        color[name] = grey
        stack.append(name)
        for child in by_name[name].children():
            if color[child] == grey:
                cycle = [*stack[stack.index(child) :], child]
                raise RubricValidationError(
                    f"requirement {name!r}: field 'dependencies' closes a cycle: {' -> '.join(cycle)}"
                )
            if color[child] == white:
                visit(child)
        stack.pop()
        color[name] = black

    for name in by_name:
        if color[name] == white:
            visit(name)


def _reachable(by_name: dict[str, Requirement], roots: Sequence[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(by_name[name].children())
    return seen


def _levels(by_name: dict[str, Requirement]) -> dict[str, int]:
    """Longest distance from a parentless requirement, in Kahn's order."""
    indegree = dict.fromkeys(by_name, 0)
    for req in by_name.values():
        for child in req.children():
            indegree[child] += 1
    level = {n: 0 for n in by_name}
    queue = [n for n in by_name if indegree[n] == 0]
    order: list[str] = []
    while queue:
        name = queue.pop(0)
        order.append(name)
        for child in by_name[name].children():
            level[child] = max(level[child], level[name] + 1)
            indegree[child] -= 1
            if indegree[child] == 0:
                queue.append(child)
    return {n: level[n] for n in by_name}
