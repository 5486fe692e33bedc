"""Overfit check: GRPO on a few training examples, and the greedy reward on exactly those examples.

A trainer that cannot raise the reward on the two to four scenarios it sees every step has a learning signal
that is broken or too weak; one that raises it there but not on 48 has a signal that does not carry across
scenarios. This script trains the real trainer (``train.trainer.train``) on the first ``--examples``
examples of a config's training set (taken in turn from each stratum, as ``logging.train_eval_sample`` takes
them: safe and unsafe scenes alike), evaluates those same examples every ``--eval-every`` steps as the
held-out sets are evaluated, and prints one JSON object: the curve, the trivial policies on the same
examples, and the diagnostics the trainer logs each step (``update/...``: did the update move the right way;
``kl/grad_share``; ``is/...``; ``advantage/deeper_mean``; zero-variance groups).

    .venv/bin/python benchmarks/overfit.py --examples 2 --steps 20 --eval-every 5 \\
        --warm-start runs/ws/warm_start [key.path=value ...]
    .venv/bin/python benchmarks/overfit.py --config configs/train/criteria_cpu.yaml --examples 4 \\
        --steps 12 --eval-every 4          # the control: per-prompt criteria, GRPO alone

Everything else is the config's (the main job's by default); ``key.path=value`` overrides it, as for
``python -m train``. With ``--warm-start DIR`` (a run folder's ``warm_start/``) the run starts from that
warm start instead of imitating the demonstrations again. The ladder of docs/results.md is this script at
``--examples`` 2, 8, 16 and 48 with equal ``--steps``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DIAGNOSTICS = (
    "reward/mean",
    "groups/zero_variance_fraction",
    "groups/depth_varies_frac",
    "advantage/deeper_mean",
    "advantage/shallower_mean",
    "advantage/deeper_token_share",
    "train/update/logp_delta_pos",
    "train/update/logp_delta_neg",
    "train/update/right_direction_frac",
    "train/kl/mean",
    "train/kl/grad_share",
    "train/is/ratio_mean",
    "train/is/ratio_min",
    "train/is/ratio_max",
    "train/is/truncated_frac",
    "train/clip/region_frac",
    "train/grad_norm",
    "turns/mean",
    "length/completion_tokens_mean",
)
"""The per-step metrics the JSON carries (``train.step.update_check`` and the rollout metrics)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/train/first_responder_cpu.yaml")
    p.add_argument("--examples", type=int, default=2, help="training examples, all evaluated (default 2)")
    p.add_argument("--steps", type=int, default=20, help="GRPO steps (default 20)")
    p.add_argument("--eval-every", type=int, default=5, help="greedy evaluation of the examples (default 5)")
    p.add_argument("--warm-start", help="a warm start folder to start from (a run's warm_start/)")
    p.add_argument("--out", help="the run folder (default: a temporary one, removed after)")
    p.add_argument(
        "--held-out", action="store_true", help="evaluate the config's held-out sets too, at the same points"
    )
    p.add_argument("overrides", nargs="*", help="key.path=value overrides of the config")
    return p


def subset_file(cfg: Any, examples: list[Any], folder: Path) -> tuple[str, str]:
    """The config field and a file of the chosen training examples (a scenario YAML, or a JSONL of criteria
    prompts), in the source file's own format, the entries copied as they are."""
    import yaml

    if cfg.env.type == "multistep":
        names = {e.name for e in examples}
        data = yaml.safe_load(Path(cfg.env.scenarios).read_text(encoding="utf-8"))
        data["scenarios"] = [s for s in data["scenarios"] if s["name"] in names]
        path = folder / "scenarios.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
        return "env.scenarios", str(path)
    prompts = {json.dumps(e.prompt, sort_keys=True) for e in examples}
    lines = Path(cfg.env.data).read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines if line.strip() and _prompt_key(line) in prompts]
    path = folder / "data.jsonl"
    path.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return "env.data", str(path)


def _prompt_key(line: str) -> str:
    from envs.examples import Example

    data = json.loads(line)
    return json.dumps(Example.from_dict(data).prompt if "prompt" in data else None, sort_keys=True)


def chosen(config: str, overrides: list[str], n: int) -> tuple[Any, list[Any]]:
    """The config and ``n`` of its training examples, as ``logging.train_eval_sample`` would take them."""
    from train.config_files import load_config
    from train.task import build_task, training_sample

    cfg = load_config(config, [*overrides, f"logging.train_eval_sample={n}"])
    env, train, _ = build_task(cfg, None)
    return cfg, training_sample(cfg, env, train)


def read_curve(run: Path, name: str = "train") -> tuple[list[dict[str, Any]], dict[str, dict[str, float]]]:
    """Each step's diagnostics, and one evaluated set's evaluations by point (``eval_<name>/...``; the
    held-out set is ``""``)."""
    steps, evals = [], {}
    suffix = f"_{name}" if name else ""
    for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        step = row.get("step")
        if "reward/mean" in row:
            steps.append({"step": step, **{k: row[k] for k in DIAGNOSTICS if k in row}})
        points = (("eval", f"step_{step}"), ("eval_warm_start", "warm_start"), ("eval_final", "after"))
        for stem, point in points:
            prefix = f"{stem}{suffix}/"
            if f"{prefix}reward_mean" in row:
                point = "before" if point == "step_0" else point
                evals[point] = {k[len(prefix) :]: v for k, v in row.items() if k.startswith(prefix)}
    return steps, evals


def paired_gain(run: Path, name: str) -> dict[str, float] | None:
    """The set's reward after training minus after the warm start (before training without one), paired by
    scenario, with its 95% t-interval (``report.md``'s own functions); None without both evaluations."""
    from rubrics.multistep.probe import paired_difference
    from train.report_md import model_score
    from train.run_folder import AFTER, BEFORE, WARM_START, RunFolder, read_held_out

    held = read_held_out(RunFolder(run))
    after = held.evaluation(AFTER, name)
    start = held.evaluation(WARM_START, name) or held.evaluation(BEFORE, name)
    if after is None or start is None:
        return None
    diff, half, n = paired_difference(
        model_score("after", after.rollouts), model_score("start", start.rollouts)
    )
    return {"diff": diff, "ci95": half, "scenarios": n}


def stops(run: Path) -> dict[str, dict[str, str]]:
    """Where each greedy rollout of the training sample ended, at each evaluation: its stop reason and, for
    a walk closed by a wrong answer, the requirement answered wrong."""
    out = {}
    for folder in sorted(run.glob("eval_*_train")):
        rows = {}
        for line in (folder / "rollouts.jsonl").read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            wrong = [v["name"] for v in (r.get("multistep") or {}).get("results", []) if not v.get("correct")]
            name = (r.get("info") or {}).get("scenario") or str(r.get("task"))
            rows[name] = (
                f"{r.get('stop_reason')}" + (f" at {wrong[0]}" if wrong else "") + f", {r['reward']:.3f}"
            )
        out[folder.name] = rows
    return out


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from train.config_files import load_config
    from train.trainer import train

    cfg, examples = chosen(args.config, args.overrides, args.examples)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="overfit_"))
    out.mkdir(parents=True, exist_ok=True)
    field, path = subset_file(cfg, examples, out)
    overrides = [
        *args.overrides,
        f"{field}={path}",
        f"max_steps={args.steps}",
        f"logging.train_eval_sample={len(examples)}",
        f"logging.eval_every={args.eval_every}",
        "logging.update_check=true",
        "logging.progress=false",
        f"logging.output_dir={out / 'run'}",
        "logging.checkpoint_every=1000000",
    ]
    if args.held_out:
        pass  # the config's held-out sets, evaluated with the sample
    elif cfg.env.type == "multistep":
        overrides += ["env.eval_scenarios=null", "env.extra_eval_scenarios={}", "env.eval_fraction=0"]
    else:
        overrides += ["env.eval_data=null", "env.eval_fraction=0"]
    if args.warm_start:
        shutil.copytree(args.warm_start, out / "run" / "warm_start", dirs_exist_ok=True)
    run_cfg = load_config(args.config, overrides)
    with contextlib.redirect_stdout(sys.stderr):  # the JSON is this script's only output
        train(run_cfg)
    steps, evals = read_curve(out / "run")
    probe = (
        json.loads((out / "run" / "probe_train.json").read_text())
        if (out / "run" / "probe_train.json").exists()
        else []
    )
    result = {
        "train_gain": paired_gain(out / "run", "train"),
        "config": args.config,
        "overrides": args.overrides,
        "examples": [e.name for e in examples],
        "steps": args.steps,
        "train_eval": {
            point: {"reward_mean": e.get("reward_mean"), "reward_ci95": e.get("reward_ci95")}
            for point, e in evals.items()
        },
        "trivial_policies": {row["policy"]: row["reward_mean"] for row in probe},
        "held_out": {
            name or "held-out": {
                **{p: e.get("reward_mean") for p, e in read_curve(out / "run", name)[1].items()},
                "gain": paired_gain(out / "run", name),
            }
            for name in ["", *run_cfg.env.extra_eval_scenarios]
            if args.held_out
        },
        "stops": stops(out / "run"),
        "per_step": steps,
        "run_dir": str(out / "run"),
    }
    print(json.dumps(result, indent=1))
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
