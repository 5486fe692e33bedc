"""The task a run trains on: the environment (``envs.build.make_env`` on the config's ``env`` section),
this process's training examples, the held-out ones and the further held-out sets."""

from __future__ import annotations

from typing import TYPE_CHECKING

from envs.backends.base import SamplingParams
from envs.build import extra_held_out, make_env
from envs.environment import Environment
from envs.examples import Example
from envs.multistep_env import MultiStepMultiTurnEnv, scenario_of
from train.config import TrainConfig

if TYPE_CHECKING:  # transformers loads only where the trainer uses it
    from transformers import PreTrainedTokenizerBase


def build_task(
    cfg: TrainConfig, tokenizer: PreTrainedTokenizerBase | None, rank: int = 0, world: int = 1
) -> tuple[Environment, list[Example], list[Example]]:
    """The environment, this process's share of the training examples, and the held-out examples."""
    sampling = SamplingParams(
        temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, max_tokens=cfg.rollout.max_tokens
    )
    env, train_examples, held_examples = make_env(cfg.env, tokenizer, sampling)
    shard = train_examples[rank::world] if world > 1 else train_examples
    if not shard:
        raise ValueError(f"process {rank} of {world} has no training examples ({len(train_examples)} in all)")
    return env, shard, held_examples


def extra_eval_examples(cfg: TrainConfig, env: Environment, train: list[Example]) -> dict[str, list[Example]]:
    """The examples of every further held-out set (``env.extra_eval_scenarios``) by name."""
    if not cfg.env.extra_eval_scenarios:
        return {}
    assert isinstance(env, MultiStepMultiTurnEnv)  # checked by the config
    training = [scenario_of(e) for e in train]
    sets = extra_held_out(cfg.env, env.multistep_rubric, training)
    return {name: [Example(scenario=s) for s in held] for name, held in sets.items()}
