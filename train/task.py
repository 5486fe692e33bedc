"""The task a run trains on: the environment (``envs.build.make_env`` on the config's ``env`` section),
the training examples, the held-out ones and the further held-out sets."""

from __future__ import annotations

import random
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
    cfg: TrainConfig, tokenizer: PreTrainedTokenizerBase | None
) -> tuple[Environment, list[Example], list[Example]]:
    """The environment, the training examples (all of them: each process takes its share of every step's,
    ``train.orchestrator``) and the held-out examples."""
    sampling = SamplingParams(
        temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, max_tokens=cfg.rollout.max_tokens
    )
    env, train_examples, held_examples = make_env(cfg.env, tokenizer, sampling)
    return env, train_examples, held_examples


def training_sample(cfg: TrainConfig, env: Environment, train: list[Example]) -> list[Example]:
    """The training examples ``logging.train_eval_sample`` evaluates: that many of ``train`` (all, when there
    are fewer), in a seeded order (``seed``), taken in turn from each stratum (``Environment.stratum``, in the
    order of their keys) so that every stratum is sampled alike. Empty at 0."""
    n = cfg.logging.train_eval_sample
    if n == 0:
        return []
    order = list(range(len(train)))
    random.Random(cfg.seed).shuffle(order)
    strata: dict[str, list[int]] = {}
    for i in order:
        strata.setdefault(str(env.stratum(train[i])), []).append(i)
    queues = [strata[key] for key in sorted(strata)]
    taken: list[int] = []
    while len(taken) < min(n, len(train)):
        for queue in queues:
            if queue and len(taken) < n:
                taken.append(queue.pop(0))
    return [train[i] for i in sorted(taken)]


def extra_eval_examples(cfg: TrainConfig, env: Environment, train: list[Example]) -> dict[str, list[Example]]:
    """The examples of every further held-out set (``env.extra_eval_scenarios``) by name."""
    if not cfg.env.extra_eval_scenarios:
        return {}
    assert isinstance(env, MultiStepMultiTurnEnv)  # checked by the config
    training = [scenario_of(e) for e in train]
    sets = extra_held_out(cfg.env, env.multistep_rubric, training)
    return {name: [Example(scenario=s) for s in held] for name, held in sets.items()}
