"""The task a run trains on: the environment, this process's training examples and the held-out ones."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from envs.backends.base import SamplingParams
from envs.datasets import split
from envs.environment import Environment, SingleTurnEnv
from envs.multistep_env import (
    DEFAULT_SYSTEM_PROMPT,
    MultiStepMultiTurnEnv,
    example_scenario,
    scenario_example,
)
from rubrics.loading import FileLoadError, parse_jsonl
from rubrics.multistep.io import RubricFileError, load_rubric, load_scenarios
from rubrics.multistep.probe import PolicyScore
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.scenario import Scenario
from train.config import TrainConfig

T = TypeVar("T")


def build_task(
    cfg: TrainConfig, tokenizer: Any, rank: int = 0, world: int = 1
) -> tuple[Environment, list[dict[str, Any]], list[dict[str, Any]]]:
    """The environment, this process's share of the training examples, and the held-out examples."""
    sampling = SamplingParams(
        temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, max_tokens=cfg.rollout.max_tokens
    )
    if cfg.env.type == "single_turn":
        env, train_examples, held_examples = _single_turn(cfg, tokenizer, sampling)
    else:
        env, train_examples, held_examples = _multistep(cfg, tokenizer, sampling)
    shard = train_examples[rank::world] if world > 1 else train_examples
    if not shard:
        raise ValueError(f"process {rank} of {world} has no training examples ({len(train_examples)} in all)")
    return env, shard, held_examples


def _single_turn(
    cfg: TrainConfig, tokenizer: Any, sampling: SamplingParams
) -> tuple[Environment, list[dict[str, Any]], list[dict[str, Any]]]:
    from rubrics.batch import import_rubric

    examples = single_turn_examples(cfg)
    train, held = _held_out(cfg, examples)
    env = SingleTurnEnv(
        examples,
        import_rubric(cfg.env.rubric),
        tokenizer,
        system_prompt=cfg.env.system_prompt,
        sampling=sampling,
        max_total_tokens=cfg.env.max_total_tokens,
    )
    return env, train, held


def single_turn_examples(cfg: TrainConfig) -> list[dict[str, Any]]:
    """The examples of ``env.data`` (JSONL); ``FileLoadError`` names the file, the line and the field."""
    assert cfg.env.data is not None  # checked by the config
    examples = []
    for line, example in parse_jsonl(cfg.env.data):
        if not isinstance(example, dict) or "prompt" not in example:
            raise FileLoadError(cfg.env.data, "is missing", line, "prompt")
        examples.append(example)
    return examples


def multistep_inputs(
    cfg: TrainConfig, warn: Callable[[RubricFileError], None] | None = None
) -> tuple[MultiStepRubric, list[Scenario], list[Scenario]]:
    """The rubric (its judge chosen and pointed as ``env`` says), the training and the held-out scenarios.

    Raises:
        FileLoadError: a file's error, naming the file, the line and the field.
        ValueError: a config field that does not fit the files, as ``env.<field>: what is wrong``."""
    rubric = load_rubric(cfg.env.rubric)
    if cfg.env.judge is not None:
        if cfg.env.judge not in rubric.judges:
            raise ValueError(
                f"env.judge: {cfg.env.judge!r} is not one of the rubric's judges ({', '.join(rubric.judges)})"
            )
        rubric.default_judge = cfg.env.judge
    _override_judge_endpoint(cfg, rubric)
    scenarios = load_scenarios(scenario_path(cfg.env.scenarios), rubric, warn=warn)
    if cfg.env.eval_scenarios:
        train, held = scenarios, load_scenarios(scenario_path(cfg.env.eval_scenarios), rubric, warn=warn)
        _check_disjoint(cfg, scenarios, held)
    else:
        train, held = _held_out(cfg, scenarios)
    return rubric, train, held


def extra_held_out(
    cfg: TrainConfig,
    rubric: MultiStepRubric,
    train: list[Scenario],
    warn: Callable[[RubricFileError], None] | None = None,
) -> dict[str, list[Scenario]]:
    """The further held-out sets of ``env.extra_eval_scenarios`` by name, each disjoint from training."""
    sets = {}
    for name, path in cfg.env.extra_eval_scenarios.items():
        held = load_scenarios(scenario_path(path), rubric, warn=warn)
        _check_disjoint(cfg, train, held, f"env.extra_eval_scenarios.{name}: {path}")
        sets[name] = held
    return sets


def extra_eval_examples(
    cfg: TrainConfig, env: Environment, train: list[dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """The examples of every further held-out set (``env.extra_eval_scenarios``) by name."""
    if not cfg.env.extra_eval_scenarios:
        return {}
    assert isinstance(env, MultiStepMultiTurnEnv)  # checked by the config
    training = [example_scenario(e) for e in train]
    sets = extra_held_out(cfg, env.multistep_rubric, training)
    return {name: [scenario_example(s) for s in held] for name, held in sets.items()}


def _multistep(
    cfg: TrainConfig, tokenizer: Any, sampling: SamplingParams
) -> tuple[Environment, list[dict[str, Any]], list[dict[str, Any]]]:
    rubric, train, held = multistep_inputs(cfg)
    env = MultiStepMultiTurnEnv(
        rubric,
        [*train, *held],
        tokenizer,
        system_prompt=cfg.env.system_prompt or DEFAULT_SYSTEM_PROMPT,
        sampling=sampling,
        max_turns=cfg.env.max_turns,
        max_total_tokens=cfg.env.max_total_tokens,
    )
    return env, [scenario_example(s) for s in train], [scenario_example(s) for s in held]


def scenario_path(path: str) -> Path:
    """A scenario file, or a ``rubric-grpo synth`` output folder (its ``scenarios.yaml``)."""
    p = Path(path)
    return p / "scenarios.yaml" if p.is_dir() else p


def _check_disjoint(cfg: TrainConfig, train: list[Scenario], held: list[Scenario], where: str = "") -> None:
    """A held-out scenario that is also trained on measures memory, not generalisation: refuse it."""
    prompts = {str(s.prompt) for s in train}
    shared = [s.name or str(s.prompt)[:60] for s in held if str(s.prompt) in prompts]
    if shared:
        raise ValueError(
            f"{where or f'env.eval_scenarios: {cfg.env.eval_scenarios}'}: {len(shared)} held-out scenario(s) also in "
            f"env.scenarios (same prompt): {', '.join(shared[:5])}"
        )


def probe_held_out(
    cfg: TrainConfig, env: Environment, train_examples: list[dict[str, Any]], held: list[dict[str, Any]]
) -> list[PolicyScore]:
    """The rubric probe's rows on the held-out scenarios, as the model plays them (``env.max_turns``); the
    majority answers are the training scenarios' (what a policy that learned only them would say)."""
    from rubrics.multistep.probe import probe

    assert isinstance(env, MultiStepMultiTurnEnv)
    return asyncio.run(
        probe(
            env.multistep_rubric,
            [example_scenario(e) for e in held],
            cfg.env.max_turns,
            majority_from=[example_scenario(e) for e in train_examples],
        )
    )


def _held_out(cfg: TrainConfig, items: list[T]) -> tuple[list[T], list[T]]:
    """``items`` split into training and held-out ones (``env.eval_fraction``, seeded); none held out at 0."""
    return split(items, cfg.env.eval_fraction, cfg.env.split_seed) if cfg.env.eval_fraction else (items, [])


def _override_judge_endpoint(cfg: TrainConfig, rubric: Any) -> None:
    """Point the rubric's judge in use at ``env.judge_base_url`` / ``env.judge_model`` when they are set."""
    from rubrics.multistep.judging import LLMRequirementJudge

    if cfg.env.judge_base_url is None and cfg.env.judge_model is None:
        return
    judge = rubric.judges[rubric.default_judge]
    if not isinstance(judge, LLMRequirementJudge):
        field = "env.judge_base_url" if cfg.env.judge_base_url is not None else "env.judge_model"
        raise ValueError(f"{field}: the judge in use, {rubric.default_judge!r}, is not an LLM judge")
    judge.base_url = cfg.env.judge_base_url or judge.base_url
    judge.model = cfg.env.judge_model or judge.model
