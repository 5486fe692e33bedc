"""The run's report: counts that add up, drops by reason, branch coverage per requirement key.

``planned == kept + sum(dropped.values())`` always holds; ``dropped`` lists every reason, zeros included.
Coverage counts, for every requirement and every answer the plan can give it, how many planned items and
how many kept scenarios have that ground truth; ``uncovered`` lists the branch keys no kept scenario has.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from envs.synth.dedupe import Duplicate
from envs.synth.item import DROP_REASONS
from envs.synth.plan import Plan, answer_label, branches, domain
from rubrics.judges.stats import JudgeClientStats
from rubrics.multistep.rubric import MultiStepRubric


def build_report(
    rubric: MultiStepRubric,
    plan: Plan,
    records: Sequence[dict[str, Any]],
    duplicates: dict[str, Duplicate],
    stats: JudgeClientStats | None = None,
) -> dict[str, Any]:
    """The report of a finished run (``stats``: this process's requests, under ``this_run``)."""
    kept = [r for r in records if r["status"] == "kept" and r["id"] not in duplicates]
    dropped: Counter[str] = Counter({reason: 0 for reason in DROP_REASONS})
    for r in records:
        if r["status"] == "dropped":
            dropped[r["reason"]] += 1
        elif r["id"] in duplicates:
            dropped["duplicate"] += 1
    repairs = [r["repair"] for r in records if r.get("repair")]
    report: dict[str, Any] = {
        "rubric": rubric.name,
        "counts": {
            "planned": plan.n,
            "kept": len(kept),
            "dropped": sum(dropped.values()),
            "repair_requested": len(repairs),
            "repair_passed_checks": sum(1 for r in repairs if r["passed"]),
        },
        "dropped": dict(dropped),
        "plan": {
            "seed": plan.seed,
            "weighting": plan.weighting,
            "routes": plan.routes_total,
            "routes_truncated": plan.routes_truncated,
            "branch_keys": len(plan.branch_keys),
        },
        "coverage": coverage(rubric, plan, kept),
        "uncovered_branch_keys": uncovered(rubric, plan, kept),
        "drops": [
            {"id": r["id"], "reason": r["reason"], "detail": r["detail"]}
            for r in records
            if r["status"] == "dropped"
        ]
        + [
            {
                "id": i,
                "reason": "duplicate",
                "detail": f"{d.field} repeats {d.of} (similarity {d.similarity})",
            }
            for i, d in sorted(duplicates.items())
        ],
    }
    if stats is not None:
        report["this_run"] = {
            "requests": stats.requests,
            "retries": stats.retries,
            "failures": stats.failures,
            "faults": dict(sorted(stats.faults.items())),
        }
    return report


def coverage(rubric: MultiStepRubric, plan: Plan, kept: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``{requirement: {answer: {"planned": n, "kept": n}}}`` over every answer a plan can give."""
    planned = Counter((n, answer_label(a)) for item in plan.items for n, a in item.answers.items())
    done = Counter((n, answer_label(a)) for r in kept for n, a in r["planned"].items())
    return {
        name: {
            answer_label(a): {
                "planned": planned[(name, answer_label(a))],
                "kept": done[(name, answer_label(a))],
            }
            for a in domain(req)
        }
        for name, req in rubric.graph.requirements.items()
    }


def uncovered(rubric: MultiStepRubric, plan: Plan, kept: Sequence[dict[str, Any]]) -> list[str]:
    """Branch keys of the plan's routes that no kept scenario has."""
    have = {(n, answer_label(a)) for r in kept for n, a in r["planned"].items()}
    missing = []
    for req in rubric.graph.requirements.values():
        for b in branches(req):
            if b.key in plan.branch_keys and not any((req.name, answer_label(a)) in have for a in b.answers):
                missing.append(b.key)
    return missing


def format_report(report: dict[str, Any]) -> str:
    """The printed summary: counts, drops by reason, coverage per requirement."""
    c = report["counts"]
    lines = [
        f"synthetic scenarios for {report['rubric'] or 'the rubric'}: {c['kept']} kept of {c['planned']} "
        f"planned ({c['dropped']} dropped; {c['repair_requested']} repair requests, "
        f"{c['repair_passed_checks']} passed the checks after repair)",
        "",
        "dropped by reason:",
        *(f"  {reason:<22} {count:>5}" for reason, count in report["dropped"].items()),
        "",
        "coverage (kept / planned) per requirement answer:",
    ]
    for name, answers in report["coverage"].items():
        cells = "  ".join(f"{a}: {v['kept']}/{v['planned']}" for a, v in answers.items())
        lines.append(f"  {name:<28} {cells}")
    if report["uncovered_branch_keys"]:
        lines += ["", f"branch keys with no kept scenario: {', '.join(report['uncovered_branch_keys'])}"]
    if "this_run" in report:
        r = report["this_run"]
        lines += [
            "",
            f"requests this run: {r['requests']} ({r['retries']} retries; faults {r['faults'] or 'none'})",
        ]
    return "\n".join(lines)
