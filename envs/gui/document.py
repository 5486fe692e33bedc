"""The rubric being edited, as plain data (``rubric_to_dict``'s shape), and every edit the app makes to it.

The document is what the library writes and reads, so a rubric loaded, left untouched and saved comes back
equal, and a document the app saves loads in the library. Every edit returns a new document; validation is
the library's own (``rubric_from_dict``), its messages mapped back to the requirement and field they name.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

import yaml

from rubrics.judges.endpoint import JudgeEndpoint
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.rubric_io import (
    RubricFileError,
    load_rubric,
    rubric_from_dict,
    rubric_to_dict,
    save_rubric,
)
from rubrics.multistep.strategies import PARAMS, STRATEGIES

Doc = dict[str, Any]
"""A rubric as plain data: ``format_version``, ``name``, ``judges``, ``requirements`` (a list of dicts),
..."""
ScenarioData = dict[str, Any]
"""One scenario as plain data (``Scenario.to_dict``'s shape)."""


@dataclass(frozen=True)
class Issue:
    """One validation finding, placed next to what causes it."""

    message: str
    """The library's message, verbatim."""
    requirement: str | None = None
    """The requirement it names, if any."""
    field: str | None = None
    """The field it names (``name``, ``question``, ``dependencies``, ``rules``, ``judge``, ...), if any."""
    warning: bool = False
    """A warning (the rubric still loads), not an error."""
    related: tuple[str, ...] = ()
    """Other requirements it concerns (every requirement on a cycle), shown the issue too."""

    def concerns(self, name: str) -> bool:
        """Whether the issue is about requirement ``name``."""
        return name == self.requirement or name in self.related


def new_document(name: str = "new_rubric") -> Doc:
    """An empty rubric: one rule judge, the default reward strategy, no requirements yet."""
    return {
        "format_version": 1,
        "name": name,
        "judges": {"rules": {"type": "rules"}},
        "default_judge": "rules",
        "reward_strategy": {"type": "level_weighted", "normalized": True},
        "requirements": [],
    }


def load_document(path: str) -> Doc:
    """The document of a rubric file (``RubricFileError`` with the library's message when it is invalid)."""
    return rubric_to_dict(load_rubric(path))


def build(doc: Doc) -> tuple[MultiStepRubric | None, list[Issue]]:
    """The library's rubric for ``doc`` and what is wrong with it (an error means no rubric)."""
    try:
        rubric = rubric_from_dict(copy.deepcopy(doc), "rubric")
    except (RubricFileError, ValueError) as exc:
        return None, [locate(str(exc), doc)]
    issues = [
        Issue(f"requirement {n!r} is unreachable from the roots {list(rubric.graph.roots)}", n, "roots", True)
        for n in rubric.graph.unreachable
    ]
    return rubric, issues


def save_document(doc: Doc, path: str) -> MultiStepRubric:
    """Write ``doc`` through the library (``RubricFileError`` and nothing written when it is invalid)."""
    rubric = rubric_from_dict(copy.deepcopy(doc), "rubric")
    save_rubric(rubric, path)
    return rubric


def to_yaml(doc: Doc) -> str:
    """The YAML text the document would be saved as (for the preview)."""
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)


_REQ_NAMED = re.compile(r"requirement '([^']+)'")
_REQ_INDEX = re.compile(r"requirements\[(\d+)\]")
_CYCLE = re.compile(r"cycle: ([\w\s>.-]+)")
_FIELD = re.compile(r"field '([^']+)'|requirements\[\d+\]\.(\w+)|requirement name ")


def locate(message: str, doc: Doc) -> Issue:
    """Which requirement and field a library message is about (by the names it quotes)."""
    requirement = None
    index = _REQ_INDEX.search(message)
    named = _REQ_NAMED.search(message)
    reqs = doc.get("requirements") or []
    if index and int(index.group(1)) < len(reqs) and isinstance(reqs[int(index.group(1))], dict):
        requirement = str(reqs[int(index.group(1))].get("name"))
    elif named:
        requirement = named.group(1)
    field = _FIELD.search(message)
    name = (field.group(1) or field.group(2) or "name") if field else None
    cycle = _CYCLE.search(message)
    related = tuple(n for n in re.split(r"\s*->\s*", cycle.group(1)) if n.isidentifier()) if cycle else ()
    return Issue(message, requirement, name, related=related)


# -- requirements -----------------------------------------------------------------------------------


def names(doc: Doc) -> list[str]:
    """Requirement names in definition order."""
    return [str(r.get("name")) for r in doc.get("requirements") or []]


def find(doc: Doc, name: str) -> dict[str, Any]:
    """The requirement called ``name`` (``KeyError`` when there is none)."""
    for req in doc.get("requirements") or []:
        if req.get("name") == name:
            return req
    raise KeyError(name)


def roots(doc: Doc) -> list[str]:
    """Where a walk starts: the declared roots, else every requirement nothing unlocks (works on an invalid
    document too, so the app can compare before and after an edit)."""
    if doc.get("roots"):
        return [str(r) for r in doc["roots"]]
    unlocked = {
        c
        for r in doc.get("requirements") or []
        for cs in (r.get("dependencies") or {}).values()
        for c in cs or []
    }
    return [n for n in names(doc) if n not in unlocked]


def parents(doc: Doc, name: str) -> list[tuple[str, Any]]:
    """The (requirement, answer) pairs that unlock ``name``."""
    return [
        (str(r.get("name")), key)
        for r in doc.get("requirements") or []
        for key, children in (r.get("dependencies") or {}).items()
        if name in (children or [])
    ]


def set_parents(doc: Doc, name: str, unlocked_by: list[tuple[str, Any]]) -> Doc:
    """``doc`` where exactly the (requirement, answer) pairs ``unlocked_by`` unlock ``name`` (a branch left
    empty is removed, as the editor writes it)."""
    wanted = {(p, float(k)) for p, k in unlocked_by}
    out = copy.deepcopy(doc)
    for req in out.get("requirements") or []:
        parent = str(req.get("name"))
        if parent == name:
            continue
        deps = dict(req.get("dependencies") or {})
        keys = [
            *deps,
            *(k for p, k in unlocked_by if p == parent and float(k) not in [float(d) for d in deps]),
        ]
        changed = False
        for key in keys:
            children = list(deps.get(key) or [])
            has, want = name in children, (parent, float(key)) in wanted
            if has != want:
                children = [*children, name] if want else [c for c in children if c != name]
                changed = True
            if children:
                deps[key] = children
            else:
                deps.pop(key, None)
        if changed:
            if deps:
                req["dependencies"] = deps
            else:
                req.pop("dependencies", None)
    return out


def add_requirement(doc: Doc, req: dict[str, Any]) -> Doc:
    """``doc`` with ``req`` appended (``ValueError`` when its name is taken)."""
    if req.get("name") in names(doc):
        raise ValueError(f"a requirement called {req.get('name')!r} already exists")
    out = copy.deepcopy(doc)
    out.setdefault("requirements", []).append(copy.deepcopy(req))
    return out


def replace_requirement(
    doc: Doc, old_name: str, req: dict[str, Any], scenarios: list[ScenarioData] | None = None
) -> tuple[Doc, list[ScenarioData]]:
    """``doc`` with requirement ``old_name`` replaced by ``req``; a new name is renamed everywhere (see
    ``rename_requirement``). Returns the document and the scenarios."""
    new_name = str(req.get("name"))
    scenarios = copy.deepcopy(scenarios or [])
    if new_name != old_name:
        if new_name in names(doc):
            raise ValueError(f"a requirement called {new_name!r} already exists")
        doc, scenarios = rename_requirement(doc, old_name, new_name, scenarios)
    out = copy.deepcopy(doc)
    out["requirements"] = [
        copy.deepcopy(req) if r.get("name") == new_name else r for r in out.get("requirements") or []
    ]
    return out, scenarios


def rename_requirement(
    doc: Doc, old: str, new: str, scenarios: list[ScenarioData] | None = None
) -> tuple[Doc, list[ScenarioData]]:
    """Rename a requirement everywhere: its own entry, every dependency list, the declared roots, and the
    scenarios' answers and revealed texts."""
    out = copy.deepcopy(doc)
    for req in out.get("requirements") or []:
        if req.get("name") == old:
            req["name"] = new
        deps = req.get("dependencies") or {}
        for key, children in deps.items():
            deps[key] = [new if c == old else c for c in children or []]
    if out.get("roots"):
        out["roots"] = [new if r == old else r for r in out["roots"]]
    renamed = []
    for scenario in copy.deepcopy(scenarios or []):
        for section in ("answers", "revealed_info"):
            if isinstance(scenario.get(section), dict):
                scenario[section] = {(new if k == old else k): v for k, v in scenario[section].items()}
        renamed.append(scenario)
    return out, renamed


def delete_requirement(
    doc: Doc, name: str, scenarios: list[ScenarioData] | None = None
) -> tuple[Doc, list[ScenarioData]]:
    """``doc`` without requirement ``name`` and without every reference to it (dependencies, roots,
    scenario answers and reveals)."""
    out = copy.deepcopy(doc)
    out["requirements"] = [r for r in out.get("requirements") or [] if r.get("name") != name]
    for req in out["requirements"]:
        deps = req.get("dependencies") or {}
        for key, children in deps.items():
            deps[key] = [c for c in children or [] if c != name]
    if out.get("roots"):
        out["roots"] = [r for r in out["roots"] if r != name] or None
        if out["roots"] is None:
            del out["roots"]
    kept = []
    for scenario in copy.deepcopy(scenarios or []):
        for section in ("answers", "revealed_info"):
            if isinstance(scenario.get(section), dict):
                scenario[section].pop(name, None)
        kept.append(scenario)
    return out, kept


# -- judges and strategy ----------------------------------------------------------------------------

LLM_JUDGE_DEFAULTS: dict[str, Any] = {k: v for k, v in JudgeEndpoint.defaults().items() if v is not None}
"""Settings an LLM judge leaves out of its YAML when they have these values (``JudgeEndpoint``'s defaults)."""


def set_judge(doc: Doc, name: str, settings: dict[str, Any], old_name: str | None = None) -> Doc:
    """``doc`` with judge ``name`` set to ``settings``; renaming ``old_name`` renames every use of it."""
    out = copy.deepcopy(doc)
    judges: dict[str, Any] = dict(out.get("judges") or {})
    if old_name is not None and old_name != name:
        if name in judges:
            raise ValueError(f"a judge called {name!r} already exists")
        judges = {(name if k == old_name else k): v for k, v in judges.items()}
        if out.get("default_judge") == old_name:
            out["default_judge"] = name
        for req in out.get("requirements") or []:
            if req.get("judge") == old_name:
                req["judge"] = name
    judges[name] = {k: v for k, v in settings.items() if LLM_JUDGE_DEFAULTS.get(k, object()) != v}
    out["judges"] = judges
    return out


def delete_judge(doc: Doc, name: str) -> Doc:
    """``doc`` without judge ``name`` (requirements that named it fall back to the default judge)."""
    out = copy.deepcopy(doc)
    judges = {k: v for k, v in (out.get("judges") or {}).items() if k != name}
    if not judges:
        raise ValueError("a rubric needs at least one judge")
    out["judges"] = judges
    if out.get("default_judge") == name:
        out["default_judge"] = next(iter(judges))
    for req in out.get("requirements") or []:
        if req.get("judge") == name:
            req.pop("judge")
    return out


def set_strategy(doc: Doc, kind: str, normalized: bool, params: dict[str, float]) -> Doc:
    """``doc`` with the reward strategy ``kind`` (only that strategy's own parameters kept)."""
    if kind not in STRATEGIES:
        raise ValueError(f"unknown reward strategy {kind!r}")
    out = copy.deepcopy(doc)
    allowed = PARAMS.get(kind, {})
    out["reward_strategy"] = {
        "type": kind,
        "normalized": bool(normalized),
        **{k: float(v) for k, v in params.items() if k in allowed},
    }
    return out


def strategy_of(doc: Doc) -> dict[str, Any]:
    """The document's reward strategy as a mapping (a bare name expanded)."""
    data = doc.get("reward_strategy") or "level_weighted"
    if isinstance(data, str):
        return {"type": data, "normalized": True}
    return dict(data)
