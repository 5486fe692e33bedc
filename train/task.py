"""The task a run trains on: the environment (``envs.build.make_env`` on the config's ``env`` section),
this process's training examples, the held-out ones and the further held-out sets."""

from __future__ import annotations

from typing import Any

from envs.backends.base import SamplingParams
from envs.build import extra_held_out, make_env
from envs.environment import Environment
from envs.multistep_env import MultiStepMultiTurnEnv, example_scenario, scenario_example
from train.config import TrainConfig


def build_task(
    cfg: TrainConfig, tokenizer: Any, rank: int = 0, world: int = 1
) -> tuple[Environment, list[dict[str, Any]], list[dict[str, Any]]]:
    """The environment, this process's share of the training examples, and the held-out examples."""
    sampling = SamplingParams(
        temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, max_tokens=cfg.rollout.max_tokens
    )
    env, train_examples, held_examples = make_env(cfg.env, tokenizer, sampling)
    shard = train_examples[rank::world] if world > 1 else train_examples
    if not shard:
        raise ValueError(f"process {rank} of {world} has no training examples ({len(train_examples)} in all)")
    return env, shard, held_examples


def extra_eval_examples(
    cfg: TrainConfig, env: Environment, train: list[dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """The examples of every further held-out set (``env.extra_eval_scenarios``) by name."""
    if not cfg.env.extra_eval_scenarios:
        return {}
    assert isinstance(env, MultiStepMultiTurnEnv)  # checked by the config
    training = [example_scenario(e) for e in train]
    sets = extra_held_out(cfg.env, env.multistep_rubric, training)
    return {name: [scenario_example(s) for s in held] for name, held in sets.items()}
