"""The docs name code that exists: every backticked dotted path into the packages (``rubrics.intervals``,
``envs.build.make_backend``, ``rubrics.multistep.walk.Walk.advance``) in ``docs/*.md`` and ``README.md``
names a module of the repository, then a name that module defines or imports, then a member of that class.

Read with ``ast``, nothing imported (no torch): a module is a file or a package folder, a name is a
``def``, a ``class``, an assignment or an import at the module's top level, and a member is one the class
body defines, one ``__init__`` assigns to ``self``, or one a base class of the repository has. Paths with
a slash, fenced code blocks and anything past a class member are not checked.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
DOTTED = re.compile(r"(?<![\w./-])(?:rubrics|envs|train)(?:\.[A-Za-z_]\w*)+(?![\w/-])")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _module_file(parts: list[str]) -> Path | None:
    path = ROOT.joinpath(*parts)
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return path / "__init__.py" if (path / "__init__.py").is_file() else None


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _top_level(tree: ast.Module) -> dict[str, ast.AST]:
    """The names a module binds at its top level (``if TYPE_CHECKING:`` and ``try:`` bodies included)."""
    names: dict[str, ast.AST] = {}
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update((t.id, node) for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.If | ast.Try):
            todo += [
                *node.body,
                *node.orelse,
                *getattr(node, "handlers", []),
                *getattr(node, "finalbody", []),
            ]
        elif isinstance(node, ast.ExceptHandler):
            todo += node.body
    return names


def _members(cls: ast.ClassDef) -> set[str]:
    """What a class body defines, and what its ``__init__`` assigns to ``self``."""
    members: set[str] = set()
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            members.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            members.add(node.target.id)
        elif isinstance(node, ast.Assign):
            members.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            for sub in ast.walk(node):
                target = sub.target if isinstance(sub, ast.AnnAssign) else None
                targets = sub.targets if isinstance(sub, ast.Assign) else [target] if target else []
                members.update(
                    t.attr
                    for t in targets
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                )
    return members


@functools.cache
def _classes() -> dict[str, list[ast.ClassDef]]:
    """Every class of the packages by name (to follow a member to a base class)."""
    found: dict[str, list[ast.ClassDef]] = {}
    for pkg in ("rubrics", "envs", "train"):
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(_tree(path)):
                if isinstance(node, ast.ClassDef):
                    found.setdefault(node.name, []).append(node)
    return found


def _has_member(cls: ast.ClassDef, name: str, seen: frozenset[str] = frozenset()) -> bool:
    if name in _members(cls):
        return True
    bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in cls.bases]
    return any(
        _has_member(base, name, seen | {cls.name})
        for b in bases
        if b not in seen
        for base in _classes().get(b, [])
    )


def unresolved(dotted: str) -> str | None:
    """Why ``dotted`` names nothing in the repository, or None when it does."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        path = _module_file(parts[:i])
        if path is not None:
            break
    else:
        return "no such module"
    rest = parts[i:]
    if not rest:
        return None
    names = _top_level(_tree(path))
    if rest[0] not in names:  # not a submodule either: the longest module prefix was taken above
        return f"{'.'.join(parts[:i])} has no {rest[0]}"
    node = names[rest[0]]
    if len(rest) > 1 and isinstance(node, ast.ClassDef) and not _has_member(node, rest[1]):
        return f"{rest[0]} has no member {rest[1]}"
    return None


def test_backticked_paths_in_the_docs_name_real_code() -> None:
    bad = []
    for doc in DOCS:
        text = FENCE.sub("", doc.read_text(encoding="utf-8"))
        for span in re.findall(r"`([^`\n]+)`", text):
            for dotted in DOTTED.findall(span):
                why = unresolved(dotted)
                if why:
                    bad.append(f"{doc.relative_to(ROOT)}: `{dotted}`: {why}")
    assert bad == [], "\n".join(sorted(set(bad)))


def test_the_check_follows_modules_names_members_and_bases() -> None:
    assert unresolved("rubrics.intervals") is None
    assert unresolved("rubrics.intervals.clustered_mean_ci") is None
    assert unresolved("rubrics.multistep.walk.Walk.advance") is None
    assert unresolved("rubrics.judges.rubric.JudgeRubric.add_reward_func") is None  # from Rubric
    assert unresolved("rubrics.no_such_module") == "rubrics has no no_such_module"
    assert unresolved("rubrics.intervals.no_such_name") == "rubrics.intervals has no no_such_name"
    assert unresolved("rubrics.rubric.Rubric.add_judge_reward") == "Rubric has no member add_judge_reward"
