"""How often the policy's sampled reply passes each step of the ideal path, given the ideal conversation so far.

GRPO learns a step only from groups in which some rollouts pass it and some do not. A step that the policy
passes with probability p is passed by at least one of G rollouts with probability ``1 - (1 - p)^G``; a
step at p near 0 is a wall: every rollout that reaches it fails it alike, its group has no variance there,
and no amount of training on the earlier steps moves it. This script measures p per step: for each scenario
it takes the ideal conversation (``warm_start.demonstrations``), and before each ideal reply it samples
``--samples`` replies from the model at ``--temperature`` (the rollouts' sampling) and judges each on that
step, exactly as the environment's walk judges a rollout (``rubrics.multistep.walk.Walk``, advanced through
the ideal replies before it). It prints one JSON object: per scenario and step, the requirements the step
judges, the share of samples that got each right and the share that passed them all; per requirement, the
mean of its share over the scenarios; the walls (the first requirement of a step that fewer than ``--wall``
of the samples get right); and the chance that a group of ``rollout.group_size`` reaches the end of the
ideal path with at least one rollout.

    .venv/bin/python benchmarks/node_pass_rates.py --model runs/ws/warm_start --scenarios NAME [NAME ...] \\
        [--config configs/train/first_responder_cpu.yaml] [--samples 16] [--temperature 0.8]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--model", required=True, help="a model folder (a run's warm_start/ or a checkpoint's model/)"
    )
    p.add_argument("--config", default="configs/train/first_responder_cpu.yaml")
    p.add_argument("--scenarios", nargs="*", default=[], help="training scenarios by name (default: all)")
    p.add_argument("--samples", type=int, default=16, help="replies sampled before each ideal reply")
    p.add_argument(
        "--temperature", type=float, default=None, help="default: the config's rollout.temperature"
    )
    p.add_argument("--wall", type=float, default=0.05, help="a step passed less often than this is a wall")
    p.add_argument("--seed", type=int, default=0)
    return p


def sample_replies(
    model: Any, tokenizer: Any, messages: list[dict[str, str]], n: int, cfg: Any, t: float
) -> list[str]:
    """``n`` replies sampled after ``messages`` through the chat template, as the rollouts sample them
    (``rollout.max_tokens``, ``rollout.top_p``)."""
    import torch

    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        out = model.generate(
            **ids,
            do_sample=t > 0,
            temperature=t if t > 0 else None,
            top_p=cfg.rollout.top_p,
            top_k=0,
            max_new_tokens=cfg.rollout.max_tokens,
            num_return_sequences=n,
            pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
        )
    start = ids["input_ids"].shape[1]
    return [tokenizer.decode(row[start:], skip_special_tokens=True).strip() for row in out]


async def scenario_rates(
    env: Any,
    example: Any,
    demo: list[dict[str, str]],
    model: Any,
    tokenizer: Any,
    cfg: Any,
    args: Any,
    t: float,
) -> list[dict[str, Any]]:
    """Per ideal reply of the scenario: the requirements it is judged on and the share of samples passing."""
    scenario = example.scenario
    rubric = env.multistep_rubric
    walk = rubric.walk(scenario.answers, scenario.revealed_info)
    system = [{"role": "system", "content": env.system_prompt}] if env.system_prompt else []
    steps = []
    for k, message in enumerate(demo):
        if message["role"] != "assistant":
            continue
        before = [*system, *demo[:k]]
        replies = sample_replies(model, tokenizer, before, args.samples, cfg, t)
        passed, correct = 0, dict[str, int]()
        for reply in replies:
            trial = copy.deepcopy(walk)
            advance = await trial.advance(before, [{"role": "assistant", "content": reply}], k)
            passed += bool(advance.results) and all(r.correct for r in advance.results)
            for r in advance.results:
                correct[r.name] = correct.get(r.name, 0) + r.correct
        ideal = await walk.advance(before, [message], k)
        names = [r.name for r in ideal.results]
        steps.append(
            {
                "turn": len(steps) + 1,
                "requirements": names,
                "pass_rate": passed / len(replies),
                # per requirement: the share of samples that reached it on this reply and got it right
                "passed": {name: correct.get(name, 0) / len(replies) for name in names},
                "example_reply": replies[0],
            }
        )
        if ideal.done:
            break
    return steps


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    import torch

    from envs.models.loading import load_causal_lm
    from train.config_files import load_config
    from train.demonstrations import load_demonstrations
    from train.task import build_task

    torch.manual_seed(args.seed)
    cfg = load_config(args.config, [])
    t = cfg.rollout.temperature if args.temperature is None else args.temperature
    model = load_causal_lm(args.model, dtype=torch.float32).eval()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    env, train, _ = build_task(cfg, tokenizer)
    if not cfg.warm_start.demonstrations:
        raise SystemExit(f"{args.config}: warm_start.demonstrations: the ideal conversations are needed")
    demos = {d.scenario: d.messages for d in load_demonstrations(cfg.warm_start.demonstrations)}
    chosen = [e for e in train if not args.scenarios or e.name in args.scenarios]
    missing = set(args.scenarios) - {e.name for e in chosen}
    if missing:
        raise SystemExit(
            f"--scenarios: not training scenarios of {args.config}: {', '.join(sorted(missing))}"
        )
    per_scenario = {}
    for example in chosen:
        per_scenario[example.name] = asyncio.run(
            scenario_rates(env, example, demos[example.name], model, tokenizer, cfg, args, t)
        )
    by_requirement: dict[str, list[float]] = {}
    walls, whole = [], {}
    g = cfg.rollout.group_size
    for name, steps in per_scenario.items():
        for step in steps:
            for req, rate in step["passed"].items():
                by_requirement.setdefault(req, []).append(rate)
            low = [req for req, rate in step["passed"].items() if rate < args.wall]
            if low:  # the first requirement of the reply that samples rarely get right
                walls.append({"scenario": name, "turn": step["turn"], "requirement": low[0]})
        p = math.prod(s["pass_rate"] for s in steps)
        whole[name] = {"ideal_path": p, f"some_of_{g}": 1 - (1 - p) ** g}
    result = {
        "model": args.model,
        "temperature": t,
        "samples": args.samples,
        "by_requirement": {k: sum(v) / len(v) for k, v in sorted(by_requirement.items())},
        "walls": walls,
        "whole_path": whole,
        "per_scenario": per_scenario,
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
