"""The synthetic-scenario pipeline: plan, generate and check every item concurrently, dedupe, write.

``run_synth(rubric_path, out, generator, SynthOptions(...))``:

1. **Plan** (``plan``): routes through the rubric covering every branch key; saved as ``work/plan.json``.
   A folder that already has a plan resumes it, after checking that the rubric and the options match.
2. **Items** (``item``): hidden description, scenario, loader and path checks with one repair request,
   re-grading. Items run concurrently (``concurrency`` in flight; the generator bounds its requests too);
   each finished item's record is written atomically to ``work/items/<id>.json`` and never redone, so a
   killed run resumes where it stopped, skipping and duplicating nothing. A resume reads only the records
   the plan names (never a temporary file a kill left, which it removes); a damaged record (not JSON, or
   not the record of its item) is named in a warning, moved to ``work/damaged/`` and redone.
3. **Dedupe** (``dedupe``) over all records in plan order, then **outputs** and the **report**.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.synth.dedupe import find_duplicates
from envs.synth.generate import Generator
from envs.synth.item import ItemContext, make_item
from envs.synth.outputs import is_temporary, write_json, write_outputs
from envs.synth.plan import Plan, PlannedItem, Weighting, make_plan, rubric_hash
from envs.synth.report import build_report
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.rubric_io import load_rubric, rubric_to_dict

log = logging.getLogger(__name__)


class ResumeMismatchError(ValueError):
    """The output folder holds a plan made for another rubric or other options."""


@dataclass(frozen=True)
class SynthOptions:
    """How many items, how they are planned and checked."""

    n: int
    """Scenarios to plan (kept ones are fewer when some are dropped)."""
    seed: int = 0
    """Seed of the plan's draw."""
    weighting: Weighting = "uniform"
    """``uniform`` over routes after covering every branch, or ``balanced`` towards the least-used
    branches."""
    max_routes: int = 10_000
    """Bound on the routes enumerated (wide DAGs)."""
    concurrency: int = 8
    """Items in flight at once."""
    regrade: bool = True
    """Validate by re-grading with the rubric's judges."""
    dedupe_threshold: float = 0.8
    """Word 3-gram Jaccard similarity at which a prompt or hidden description is a near duplicate."""
    progress: bool = True
    """Show a progress bar."""

    def __post_init__(self) -> None:
        if self.n < 1 or self.concurrency < 1 or self.max_routes < 1:
            raise ValueError("n, concurrency and max_routes must be >= 1")
        if not 0.0 < self.dedupe_threshold <= 1.0:
            raise ValueError(f"dedupe_threshold must lie in (0, 1], got {self.dedupe_threshold}")


def load_or_make_plan(rubric: MultiStepRubric, work: Path, options: SynthOptions) -> Plan:
    """The folder's plan when it has one (checked against the rubric and options), else a new one."""
    path = work / "plan.json"
    data = rubric_to_dict(rubric)
    saved = _read_json(path, work) if path.is_file() else None
    if saved is not None:
        plan = Plan.from_dict(saved)
        wanted = {
            "rubric_hash": rubric_hash(data),
            "n": options.n,
            "seed": options.seed,
            "weighting": options.weighting,
        }
        have = {k: getattr(plan, k) for k in wanted}
        if have != wanted:
            diff = {k: (have[k], wanted[k]) for k in wanted if have[k] != wanted[k]}
            settings = ", ".join(f"{k}: {a!r} there, {b!r} now" for k, (a, b) in diff.items())
            raise ResumeMismatchError(
                f"{work.parent} holds a run with other settings ({settings}); "
                "use another --out folder or the same settings to resume"
            )
        return plan
    plan = make_plan(rubric.graph, data, options.n, options.seed, options.weighting, options.max_routes)
    write_json(path, plan.to_dict())
    return plan


def _read_json(path: Path, work: Path) -> Any:
    """``path``'s JSON mapping, or None (with a warning) after moving a damaged file to ``work/damaged``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        reason = str(exc)
    else:
        if isinstance(data, dict):
            return data
        reason = f"expected a JSON object, got {type(data).__name__}"
    set_aside(path, work, reason)
    return None


def set_aside(path: Path, work: Path, reason: str) -> Path:
    """Move a damaged work file to ``work/damaged/`` (never over an earlier one) and say so."""
    damaged = work / "damaged"
    damaged.mkdir(exist_ok=True)
    target, n = damaged / path.name, 1
    while target.exists():
        target, n = damaged / f"{path.name}.{n}", n + 1
    shutil.move(path, target)
    log.warning("%s: damaged (%s); moved to %s, it will be redone", path, reason, target)
    return target


def remove_temporaries(*folders: Path) -> None:
    """Delete the temporary files and folders a killed run left in ``folders`` (never a finished file)."""
    for folder in folders:
        for path in folder.iterdir() if folder.is_dir() else []:
            if is_temporary(path):
                shutil.rmtree(path) if path.is_dir() else path.unlink()


def load_records(items_dir: Path, plan: Plan) -> dict[str, dict[str, Any]]:
    """Finished items' records by id: ``<id>.json`` for each planned item, nothing else. A damaged record
    (unreadable, or another item's) is set aside (``set_aside``), so its item is redone."""
    records = {}
    for item in plan.items:
        path = items_dir / f"{item.id}.json"
        if not path.is_file():
            continue
        record = _read_json(path, items_dir.parent)
        if record is None:
            continue
        if not _is_record_of(record, item.id):
            set_aside(path, items_dir.parent, f"not a finished record of item {item.id}")
            continue
        records[item.id] = record
    return records


def _is_record_of(record: dict[str, Any], item_id: str) -> bool:
    """Whether ``record`` is a finished record (``make_item``'s) of item ``item_id``."""
    if record.get("id") != item_id or record.get("status") not in ("kept", "dropped"):
        return False
    return record["status"] == "dropped" or all(k in record for k in ("scenario", "hidden_description"))


async def run_synth(
    rubric_path: str | Path, out: str | Path, generator: Generator, options: SynthOptions
) -> dict[str, Any]:
    """Run (or resume) the pipeline into ``out``; the report."""
    rubric = load_rubric(rubric_path)
    out = Path(out)
    work = out / "work"
    items_dir = work / "items"
    items_dir.mkdir(parents=True, exist_ok=True)
    remove_temporaries(out, work, items_dir)
    plan = load_or_make_plan(rubric, work, options)
    records = load_records(items_dir, plan)
    todo = [item for item in plan.items if item.id not in records]
    ctx = ItemContext(rubric, generator, work / "scratch", options.regrade)
    bar = _progress(options.progress, len(plan.items), len(plan.items) - len(todo))
    slots = asyncio.Semaphore(options.concurrency)

    async def one(item: PlannedItem) -> None:
        async with slots:
            record = await make_item(item, ctx)
        write_json(items_dir / f"{item.id}.json", record)
        records[item.id] = record
        if bar is not None:
            bar.update(1)

    try:
        await asyncio.gather(*(one(item) for item in todo))
    finally:
        if bar is not None:
            bar.close()
    ordered = [records[item.id] for item in plan.items]
    candidates = [
        (r["id"], {"prompt": _text(r["scenario"]["prompt"]), "hidden_description": r["hidden_description"]})
        for r in ordered
        if r["status"] == "kept"
    ]
    duplicates = find_duplicates(candidates, options.dedupe_threshold)
    report = build_report(rubric, plan, ordered, duplicates, generator.stats)
    kept = [r for r in ordered if r["status"] == "kept" and r["id"] not in duplicates]
    write_outputs(out, rubric.name, kept, report)
    return report


def _text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    return "\n".join(str(m.get("content", "")) for m in prompt)


def _progress(enabled: bool, total: int, done: int) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=done, desc="synth", unit="item")
