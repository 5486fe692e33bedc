"""What the host-memory settings of a CPU run cost in step time: the main job's GRPO step
(``benchmarks/rollout_step.py``, a randomly initialised model of a real architecture, no evaluation) with
the settings off (``onednn_cache_capacity=null trim_host_memory=false``) and on (the defaults: both of
oneDNN's shape caches held to 256 entries, ``malloc_trim(0)`` after every step), side by side: the two arms
run one after the other, ``--rounds`` times, each in a fresh process.

The same seed samples the same rollouts in both arms (docs/results.md, Host memory over a long run), so step
``k`` of one arm does the same work as step ``k`` of the other: the ratio on/off is taken per step, over the
steps after the first (its one-time set-up), and reported with a 95% interval over those pairs, clustered
by step (``rubrics.intervals``). Beside it, each arm's RSS per step and its slope (``train.memory_trend``).

    .venv/bin/python benchmarks/host_memory_fix_cost.py                         # SmolLM2-135M's shape, 2 rounds
    .venv/bin/python benchmarks/host_memory_fix_cost.py --arch tiny --steps 3 --rounds 1

Prints one JSON object. The measurement: docs/results.md, Host memory over a long run.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rubrics.intervals import clustered_mean_ci  # noqa: E402

ARMS = {
    "off": ["onednn_cache_capacity=null", "trim_host_memory=false"],
    "on": [],  # the defaults
}


def run_arm(arch: str, steps: int, shape: list[str], overrides: list[str], work: Path) -> dict:
    sets = [f"--set={o}" for o in overrides]
    cmd = [sys.executable, str(ROOT / "benchmarks/rollout_step.py"), "--arch", arch, "--steps", str(steps),
           "--no-eval", "--out", str(work), *shape, *sets]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {out.returncode}:\n{out.stderr[-3000:]}")
    return json.loads((work / "result.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=2, help="scenarios a step (the main job's 2)")
    parser.add_argument("--group", type=int, default=4, help="rollouts a scenario (the main job's 4)")
    args = parser.parse_args()
    shape = ["--prompts", str(args.prompts), "--group", str(args.group)]

    runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory(prefix="host_memory_fix_cost_") as tmp:
        for r in range(args.rounds):
            for arm, overrides in ARMS.items():
                runs[arm].append(run_arm(args.arch, args.steps, shape, overrides, Path(tmp) / f"{arm}{r}"))
    ratios, steps, same_rewards = [], [], True
    for off, on in zip(runs["off"], runs["on"], strict=True):
        for a, b in zip(off["steps"][1:], on["steps"][1:], strict=True):
            ratios.append(b["step_s"] / a["step_s"])
            steps.append(str(a["step"]))
            same_rewards &= a["reward"] == b["reward"] and a["turns_mean"] == b["turns_mean"]
    # one cluster per step: step k of every round does the same work
    mean, half = clustered_mean_ci(ratios, steps)
    ci95 = None if math.isnan(half) else [round(mean - half, 4), round(mean + half, 4)]
    out = {
        "benchmark": "host_memory_fix_cost",
        "arch": args.arch,
        "shape": {"prompts": args.prompts, "group": args.group, "steps": args.steps, "rounds": args.rounds},
        "arms": {arm: " ".join(o) or "(the defaults)" for arm, o in ARMS.items()},
        # the same rewards and turns step by step: the arms did the same work
        "same_rollouts": same_rewards,
        "step_s_ratio_on_over_off": round(mean, 4),
        "step_s_ratio_interval95": ci95,
        "pairs": len(ratios),
        "per_arm": {
            arm: [
                {
                    "step_s": [round(s["step_s"], 2) for s in run["steps"]],
                    "trim_s": [round(s["trim_s"], 3) for s in run["steps"]],  # inside step_s
                    "rss_gib": [round(s["rss_gib"], 3) for s in run["steps"]],
                    "rss_gib_per_step": run["memory_slopes"].get("memory/rss_gib", {}).get("gib_per_step"),
                }
                for run in arm_runs
            ]
            for arm, arm_runs in runs.items()
        },
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
