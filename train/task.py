"""The pieces the trainer assembles: the environment and its data, evaluations, weight sync to vLLM."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envs.backends.base import InferenceBackend, SamplingParams
from envs.datasets import split
from envs.environment import Environment, SingleTurnEnv
from envs.multistep_env import DEFAULT_SYSTEM_PROMPT, MultiStepMultiTurnEnv, scenario_example
from rubrics.multistep.io import load_rubric, load_scenarios
from train.config import TrainConfig


def build_env(
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
    from rubrics.batch import load_rubric as load_rubric_spec

    assert cfg.env.data is not None  # checked by the config
    examples = [json.loads(line) for line in Path(cfg.env.data).read_text().splitlines() if line.strip()]
    for i, example in enumerate(examples):
        if "prompt" not in example:
            raise ValueError(f"{cfg.env.data}:{i + 1}: field 'prompt' is missing")
    train, held = (
        split(examples, cfg.env.eval_fraction, cfg.env.split_seed)
        if cfg.env.eval_fraction
        else (examples, [])
    )
    env = SingleTurnEnv(
        examples,
        load_rubric_spec(cfg.env.rubric),
        tokenizer,
        system_prompt=cfg.env.system_prompt,
        sampling=sampling,
        max_total_tokens=cfg.env.max_total_tokens,
    )
    return env, train, held


def _multistep(
    cfg: TrainConfig, tokenizer: Any, sampling: SamplingParams
) -> tuple[Environment, list[dict[str, Any]], list[dict[str, Any]]]:
    rubric = load_rubric(cfg.env.rubric)
    if cfg.env.judge is not None:
        if cfg.env.judge not in rubric.judges:
            raise ValueError(
                f"env.judge: {cfg.env.judge!r} is not one of the rubric's judges ({', '.join(rubric.judges)})"
            )
        rubric.default_judge = cfg.env.judge
    _override_judge_endpoint(cfg, rubric)
    scenarios = load_scenarios(cfg.env.scenarios, rubric)
    train, held = (
        split(scenarios, cfg.env.eval_fraction, cfg.env.split_seed)
        if cfg.env.eval_fraction
        else (scenarios, [])
    )
    env = MultiStepMultiTurnEnv(
        rubric,
        scenarios,
        tokenizer,
        system_prompt=cfg.env.system_prompt or DEFAULT_SYSTEM_PROMPT,
        sampling=sampling,
        max_turns=cfg.env.max_turns,
        max_total_tokens=cfg.env.max_total_tokens,
    )
    return env, [scenario_example(s) for s in train], [scenario_example(s) for s in held]


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


async def evaluate(
    cfg: TrainConfig,
    env: Environment,
    backend: InferenceBackend,
    examples: list[dict[str, Any]],
    out_dir: Path,
) -> dict[str, Any]:
    """Held-out evaluation: rollouts to JSONL, a summary dict (the same for before and after training)."""
    import torch

    from envs.evaluation import plot_summary, run_eval

    torch.manual_seed(cfg.seed + 424_242)  # the same sampling noise before and after training
    summary, states = await run_eval(
        env, backend, examples, cfg.logging.eval_group_size, out_dir / "rollouts.jsonl", progress=False
    )
    plot_summary(summary, states, out_dir / "eval.png")
    (out_dir / "summary.json").write_text(json.dumps(summary.as_dict(), indent=2, default=str))
    return summary.as_dict()


async def sync_weights(
    cfg: TrainConfig, accelerator: Any, model: Any, tokenizer: Any, backend: Any, step: int
) -> None:
    """Push the policy's weights to the vLLM servers (gathered first under ZeRO-3), labelled ``step-N``
    (the servers' ``/weight_info``); optionally check that the servers' greedy tokens equal the trainer's.
    Every process calls it: gathering and the check's forward pass are collective under ZeRO-3."""
    from envs.weight_sync import push_weights

    state_dict = accelerator.get_state_dict(model)  # full weights on the main process, whatever the sharding
    if accelerator.is_main_process:
        await push_weights(cfg.rollout.vllm_urls, state_dict, weight_version=f"step-{step}")
    accelerator.wait_for_everyone()
    if cfg.rollout.check_sync:
        await check_sync(accelerator.unwrap_model(model), tokenizer, backend, accelerator.is_main_process)


async def check_sync(
    policy: Any, tokenizer: Any, backend: InferenceBackend, ask_server: bool = True, tokens: int = 8
) -> None:
    """Raise if the server's greedy continuation of a fixed prompt differs from the trainer's.

    The trainer's side runs on every process (under ZeRO-3 each forward pass gathers the sharded
    parameters collectively); only the process with ``ask_server`` queries the server and compares."""
    import torch

    from envs.chat import chat_ids

    prompt = chat_ids(tokenizer, [{"role": "user", "content": "Describe the first thing you check."}])
    ids = torch.tensor([prompt], device=next(policy.parameters()).device)
    with torch.no_grad():
        local = policy.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, do_sample=False
        )[0, len(prompt) :].tolist()
    if not ask_server:
        return
    (served,) = await backend.generate(prompt, SamplingParams(n=1, temperature=0.0, max_tokens=tokens))
    if served.completion_ids != local[: len(served.completion_ids)]:
        raise RuntimeError(f"weight sync check failed: server {served.completion_ids} != trainer {local}")
