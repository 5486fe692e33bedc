"""Checks of one generated scenario: the loader's, then the planned route's.

1. **Loader checks** (drop reason ``invalid``): the scenario goes through
   ``rubrics.multistep.scenario_io``'s own ``load_scenarios``, the code behind ``rubric-grpo rubric validate
   --scenarios``, so a synthetic scenario passes exactly when a hand-written one would (known names, answers
   in each requirement's domain, field shapes, ``revealed_info`` rules); plus the fields only the pipeline
   uses (ideal replies, wrong reply).
2. **Path checks** (drop reason ``off_path``): the ground-truth walk of its answers (``ground_truth_walk``)
   must be the planned route: every planned requirement answered with its planned answer, nothing answered
   off the route, the walk ending at terminals (no missing ground truth), ``revealed_info`` only on
   requirements the route reaches.

An item that fails either gets one repair request with the message (``pipeline``), then is dropped.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

from envs.synth.plan import PlannedItem, answer_label
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.rubric_io import RubricFileError, load_scenarios
from rubrics.multistep.scenario import Scenario
from rubrics.multistep.walk import ground_truth_walk
from rubrics.types import StopReason

SCENARIO_FIELDS = ("prompt", "answers", "revealed_info")
EXTRA_FIELDS = ("ideal_replies", "wrong_reply")


class CheckError(ValueError):
    """A generated scenario failed a check; ``reason`` is the drop reason (``invalid`` or ``off_path``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        """``invalid`` (loader checks) or ``off_path`` (path checks)."""


def scenario_data(reply: dict[str, Any], name: str, description: str, hidden: str) -> dict[str, Any]:
    """The scenario entry (file format) of a generator reply: its scenario fields plus the pipeline's
    name and hidden description; anything else the reply has is kept, for the loader to reject."""
    data: dict[str, Any] = {"name": name}
    if description:
        data["description"] = description
    data["hidden_description"] = hidden
    data.update({k: v for k, v in reply.items() if k not in EXTRA_FIELDS})
    return data


def check_scenario(
    reply: dict[str, Any],
    item: PlannedItem,
    rubric: MultiStepRubric,
    *,
    name: str,
    description: str,
    hidden: str,
    scratch: Path,
) -> Scenario:
    """The validated scenario of ``reply``, or ``CheckError`` saying what is wrong."""
    scenario = loader_check(scenario_data(reply, name, description, hidden), rubric, scratch)
    _check_replies(reply, item)
    path_check(scenario, item, rubric)
    return scenario


def loader_check(data: dict[str, Any], rubric: MultiStepRubric, scratch: Path) -> Scenario:
    """``data`` through ``load_scenarios`` (a one-line JSONL file in ``scratch``), strictly: what the
    loader only warns about (a reveal that can never be shown) is an error for generated data."""
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", suffix=".jsonl", dir=scratch, delete=False, encoding="utf-8"
    ) as handle:
        handle.write(json.dumps(data, ensure_ascii=False) + "\n")
        path = Path(handle.name)
    try:
        (scenario,) = load_scenarios(path, rubric, strict=True)
    except RubricFileError as exc:
        raise CheckError("invalid", str(exc).replace(str(path), "the scenario")) from None
    finally:
        path.unlink(missing_ok=True)
    return scenario


def _check_replies(reply: dict[str, Any], item: PlannedItem) -> None:
    ideal = reply.get("ideal_replies")
    if not isinstance(ideal, dict):
        raise CheckError("invalid", "field 'ideal_replies' must map every step to a reply")
    missing = [n for n in item.path if not isinstance(ideal.get(n), str) or not ideal[n].strip()]
    if missing:
        raise CheckError("invalid", f"field 'ideal_replies' has no reply for {missing}")
    if item.wrong and (not isinstance(reply.get("wrong_reply"), str) or not reply["wrong_reply"].strip()):
        raise CheckError("invalid", "field 'wrong_reply' must be a non-empty string")


def path_check(scenario: Scenario, item: PlannedItem, rubric: MultiStepRubric) -> None:
    """``CheckError("off_path", ...)`` unless the scenario's ground-truth walk is ``item``'s route."""
    graph = rubric.graph
    problems = []
    for req_name, planned in item.answers.items():
        entry = scenario.answers.get(req_name)
        if entry is None:
            problems.append(f"{req_name!r} has no answer (planned {answer_label(planned)})")
        elif not _same(entry["answer"], planned):
            problems.append(
                f"{req_name!r} is answered {answer_label(entry['answer'])}, planned {answer_label(planned)}"
            )
    extra = sorted(set(scenario.answers) - set(item.answers))
    if extra:
        problems.append(f"requirements off the planned path are answered: {extra}")
    off_reveals = sorted(set(scenario.revealed_info) - set(item.answers))
    if off_reveals:
        problems.append(f"'revealed_info' names requirements the path never reaches: {off_reveals}")
    walk = ground_truth_walk(graph, scenario.answers)
    if not problems and (walk.stop_reason != StopReason.TERMINAL or set(walk.path) != set(item.answers)):
        problems.append(f"the answers walk {walk.path} ({walk.stop_reason}), not the planned path")
    if problems:
        raise CheckError("off_path", "; ".join(problems))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list) or isinstance(b, list):
        return answer_label(a) == answer_label(b)
    return math.isclose(float(a), float(b), abs_tol=1e-9)
