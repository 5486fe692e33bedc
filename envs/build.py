"""How an environment and a backend are built: ``make_env`` from an ``EnvConfig``, ``make_backend`` from plain
arguments. The trainer (``train.task``, ``train.backend``), ``rubric-grpo eval`` (``envs.evaluation.job``) and
``rubric-grpo synth``'s local generator (``envs.synth.generate``) all build theirs here.

Errors about a setting name it as the ``env`` section of a run config does (``env.judge: ...``); a file's
own error is a ``FileLoadError`` naming the file, the line and the field.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from envs.backends.base import SamplingParams, TrainingBackend
from envs.config import EnvConfig
from envs.datasets import split
from envs.environment import Environment, SingleTurnEnv
from envs.examples import Example
from envs.multistep_env import DEFAULT_SYSTEM_PROMPT, MultiStepMultiTurnEnv
from rubrics.criteria.autograders.mixed import RuleFirstGrader
from rubrics.criteria.example import CriteriaExample
from rubrics.judges.client import LLMJudgeClient
from rubrics.loading import FileLoadError, parse_jsonl
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.rubric_io import RubricFileError, load_rubric, load_scenarios
from rubrics.multistep.scenario import Scenario

if TYPE_CHECKING:
    from envs.backends.local import LocalBackend
    from envs.serving.transfer import NcclSettings

T = TypeVar("T")

Examples = list[Example]


def make_env(
    cfg: EnvConfig, tokenizer: Any, sampling: SamplingParams
) -> tuple[Environment, Examples, Examples]:
    """The environment ``cfg`` describes, sampling with ``sampling``, and its training and held-out examples
    (``eval_scenarios``, or the seeded ``eval_fraction`` split; none held out at 0)."""
    if cfg.type == "criteria":
        from envs.criteria.environment import DEFAULT_SYSTEM_PROMPT as CRITERIA_PROMPT
        from envs.criteria.environment import CriteriaEnv

        train_set, held_set = criteria_inputs(cfg)
        grader, client = criteria_grader(cfg, [*train_set, *held_set])
        env: Environment = CriteriaEnv(
            [*train_set, *held_set],
            grader,
            tokenizer,
            system_prompt=cfg.system_prompt or CRITERIA_PROMPT,
            sampling=sampling,
            max_total_tokens=cfg.max_total_tokens,
            show_reference=cfg.show_reference,
            judge_client=client,
            clip_reward=cfg.clip_reward,
            scaffold=cfg.scaffold,
        )
        return env, [Example(criteria=e) for e in train_set], [Example(criteria=e) for e in held_set]
    if cfg.type == "single_turn":
        from rubrics.score_command import import_rubric

        examples = single_turn_examples(cfg)
        train, held = _held_out(cfg, examples)
        env = SingleTurnEnv(
            examples,
            import_rubric(cfg.rubric),
            tokenizer,
            system_prompt=cfg.system_prompt,
            sampling=sampling,
            max_total_tokens=cfg.max_total_tokens,
        )
        return env, train, held
    rubric, train_scenarios, held_scenarios = multistep_inputs(cfg)
    env = MultiStepMultiTurnEnv(
        rubric,
        [*train_scenarios, *held_scenarios],
        tokenizer,
        system_prompt=cfg.system_prompt or DEFAULT_SYSTEM_PROMPT,
        sampling=sampling,
        max_turns=cfg.max_turns,
        max_total_tokens=cfg.max_total_tokens,
    )
    return env, [Example(scenario=s) for s in train_scenarios], [Example(scenario=s) for s in held_scenarios]


def single_turn_examples(cfg: EnvConfig) -> Examples:
    """The examples of ``env.data`` (JSONL); ``FileLoadError`` names the file, the line and the field."""
    assert cfg.data is not None  # checked by the config
    examples = []
    for line, data in parse_jsonl(cfg.data):
        if not isinstance(data, dict) or "prompt" not in data:
            raise FileLoadError(cfg.data, "is missing", line, "prompt")
        try:
            examples.append(Example.from_dict(data))
        except ValueError as exc:
            raise FileLoadError(cfg.data, str(exc), line, "prompt") from None
    return examples


def check_env_inputs(cfg: EnvConfig) -> None:
    """Read and check every file the environment of ``cfg`` will read, before any model loads.

    Raises:
        FileLoadError: a file's error, naming the file, the line and the field.
        ValueError: a config field that does not fit the files, as ``env.<field>: what is wrong``."""
    if cfg.type == "criteria":
        criteria_inputs(cfg, warn=lambda warning: None)  # the run logs the warnings
    elif cfg.type == "single_turn":
        single_turn_examples(cfg)
    else:
        rubric, train, _ = multistep_inputs(cfg, warn=lambda warning: None)  # the run logs the warnings
        extra_held_out(cfg, rubric, train, warn=lambda warning: None)


def criteria_inputs(
    cfg: EnvConfig, warn: Callable[[FileLoadError], None] | None = None
) -> tuple[list[CriteriaExample], list[CriteriaExample]]:
    """The training and held-out examples of a criteria dataset (``env.eval_data``, or the seeded
    ``eval_fraction`` split); what the files hold that is read but ignored goes to ``warn`` (default: the
    log).

    Raises:
        FileLoadError: a bad record, naming the file, the line and the field (the file is refused whole).
        ValueError: a held-out example also in training, or LLM-judged criteria without a judge."""
    from envs.criteria.data import load_criteria_examples

    assert cfg.data is not None  # checked by the config
    examples = load_criteria_examples(cfg.data, cfg.format, cfg.data_split, warn)
    if cfg.eval_data:
        train = examples
        held = load_criteria_examples(cfg.eval_data, cfg.format, cfg.data_split, warn)
        shared = sorted({e.id for e in train} & {e.id for e in held})
        if shared:
            raise ValueError(
                f"env.eval_data: {len(shared)} held-out example(s) also in env.data (same id): "
                f"{', '.join(shared[:5])}"
            )
    else:
        train, held = _held_out(cfg, examples)
    unruled = [e for e in (*train, *held) if e.needs_llm()]
    if unruled and cfg.judge_base_url is None:
        raise ValueError(
            f"env.judge_base_url: {len(unruled)} example(s) have criteria without a rule (the first: "
            f"{unruled[0].id!r}), so an LLM judge must grade them; set env.judge_base_url and env.judge_model"
        )
    return train, held


def criteria_grader(
    cfg: EnvConfig, examples: Sequence[CriteriaExample]
) -> tuple[RuleFirstGrader, LLMJudgeClient | None]:
    """The grader of a criteria environment: rules first, then ``env.grader`` on the LLM judge of
    ``env.judge_base_url`` when some criterion has no rule (and its client, whose counters are logged), at
    most two gradings per judge slot asking the judge at once (``RuleFirstGrader.max_gradings``)."""
    from rubrics.criteria.autograders import (
        PerCriterionGrader,
        PerCriterionOneShotGrader,
        RubricAsJudgeGrader,
    )

    endpoint = cfg.criteria_judge_endpoint()
    if endpoint is None or not any(e.needs_llm() for e in examples):
        return RuleFirstGrader(None), None
    client = LLMJudgeClient.from_endpoint(endpoint)
    kind = {
        "per_criterion": PerCriterionGrader,
        "one_shot": PerCriterionOneShotGrader,
        "holistic": RubricAsJudgeGrader,
    }[cfg.grader]
    # two gradings per judge slot: the judge's queue stays full while the next ones build their prompts
    slots = 2 * endpoint.max_concurrency
    return RuleFirstGrader(kind.from_client(client), max_gradings=slots), client


def multistep_inputs(
    cfg: EnvConfig, warn: Callable[[RubricFileError], None] | None = None
) -> tuple[MultiStepRubric, list[Scenario], list[Scenario]]:
    """The rubric (its judge chosen and pointed as ``env`` says), the training and the held-out scenarios.

    Raises:
        FileLoadError: a file's error, naming the file, the line and the field.
        ValueError: a config field that does not fit the files, as ``env.<field>: what is wrong``."""
    rubric = load_rubric(cfg.rubric)
    if cfg.judge is not None:
        if cfg.judge not in rubric.judges:
            raise ValueError(
                f"env.judge: {cfg.judge!r} is not one of the rubric's judges ({', '.join(rubric.judges)})"
            )
        rubric.default_judge = cfg.judge
    _override_judge_endpoint(cfg, rubric)
    scenarios = load_scenarios(scenario_path(cfg.scenarios), rubric, warn=warn)
    if cfg.eval_scenarios:
        train, held = scenarios, load_scenarios(scenario_path(cfg.eval_scenarios), rubric, warn=warn)
        _check_disjoint(cfg, scenarios, held)
    else:
        train, held = _held_out(cfg, scenarios)
    return rubric, train, held


def extra_held_out(
    cfg: EnvConfig,
    rubric: MultiStepRubric,
    train: list[Scenario],
    warn: Callable[[RubricFileError], None] | None = None,
) -> dict[str, list[Scenario]]:
    """The further held-out sets of ``env.extra_eval_scenarios`` by name, each disjoint from training."""
    sets = {}
    for name, path in cfg.extra_eval_scenarios.items():
        held = load_scenarios(scenario_path(path), rubric, warn=warn)
        _check_disjoint(cfg, train, held, f"env.extra_eval_scenarios.{name}: {path}")
        sets[name] = held
    return sets


def scenario_path(path: str) -> Path:
    """A scenario file, or a ``rubric-grpo synth`` output folder (its ``scenarios.yaml``)."""
    p = Path(path)
    return p / "scenarios.yaml" if p.is_dir() else p


def _check_disjoint(cfg: EnvConfig, train: list[Scenario], held: list[Scenario], where: str = "") -> None:
    """A held-out scenario that is also trained on measures memory, not generalisation: refuse it."""
    prompts = {str(s.prompt) for s in train}
    shared = [s.name or str(s.prompt)[:60] for s in held if str(s.prompt) in prompts]
    if shared:
        raise ValueError(
            f"{where or f'env.eval_scenarios: {cfg.eval_scenarios}'}: {len(shared)} held-out scenario(s) "
            f"also in env.scenarios (same prompt): {', '.join(shared[:5])}"
        )


def _held_out(cfg: EnvConfig, items: list[T]) -> tuple[list[T], list[T]]:
    """``items`` split into training and held-out ones (``env.eval_fraction``, seeded); none held out at 0."""
    return split(items, cfg.eval_fraction, cfg.split_seed) if cfg.eval_fraction else (items, [])


def _override_judge_endpoint(cfg: EnvConfig, rubric: MultiStepRubric) -> None:
    """Point the rubric's judge in use at ``env.judge_base_url`` / ``env.judge_model`` when they are set."""
    from rubrics.multistep.judging import LLMRequirementJudge

    overrides = cfg.judge_overrides()
    if not overrides:
        return
    judge = rubric.judges[rubric.default_judge]
    if not isinstance(judge, LLMRequirementJudge):
        field = "env.judge_base_url" if cfg.judge_base_url is not None else "env.judge_model"
        raise ValueError(f"{field}: the judge in use, {rubric.default_judge!r}, is not an LLM judge")
    judge.retarget(**overrides)


def make_backend(
    backend: str,
    model_dir: str | Path,
    *,
    vllm_urls: Sequence[str] = (),
    weights_dir: str | None = None,
    nccl: NcclSettings | None = None,
    policy: Any = None,
    tokenizer: Any = None,
    max_batch_rows: int = 64,
    sampling_dtype: str | None = None,
    adapter_prefix: str | None = None,
    executor: concurrent.futures.Executor | None = None,
    colocate: Mapping[str, Any] | None = None,
) -> tuple[TrainingBackend, Any]:
    """The backend named ``backend`` on the model of ``model_dir``, and the tokenizer it samples with.

    ``local``: transformers in this process, sampling from ``policy`` (the trainer's module, with its
    ``tokenizer``) or, without one, from ``model_dir`` loaded on the CPU in float32; ``max_batch_rows`` and
    ``sampling_dtype`` as ``LocalBackend`` takes them, and ``executor``, the thread it runs torch on (its own
    when None). ``vllm``: the servers at ``vllm_urls``, which serve ``model_dir`` and read each step's
    weights from ``weights_dir``, or receive them over NCCL with ``nccl`` set (``VllmBackend``'s); the
    tokenizer is ``tokenizer``, or ``model_dir``'s; a LoRA policy's adapters are named
    ``<adapter_prefix>-step-N`` there. ``vllm_colocate``: a vLLM engine in
    this process on ``model_dir``, built with ``colocate``'s keyword arguments (``ColocatedVllmBackend``'s;
    by default 4096 tokens a sequence and a KV cache of 1 GiB), its engine calls on ``executor``."""
    if backend == "local":
        local = _local_backend(model_dir, policy, tokenizer, max_batch_rows, sampling_dtype, executor)
        return local, local.tokenizer
    if backend == "vllm":
        from envs.backends.vllm import VllmBackend

        tokenizer = _tokenizer_for(model_dir, tokenizer)
        backend_ = VllmBackend(
            vllm_urls, str(model_dir), adapter_prefix=adapter_prefix, weights_dir=weights_dir, nccl=nccl
        )
        return backend_, tokenizer
    if backend == "vllm_colocate":
        from envs.backends.colocate import ColocatedVllmBackend

        tokenizer = _tokenizer_for(model_dir, tokenizer)
        options = dict(colocate or {})
        options.setdefault("max_model_len", 4096)
        options.setdefault("kv_cache_bytes", 1 << 30)  # vLLM's own default takes most of a CPU host's memory
        return ColocatedVllmBackend(model_dir, tokenizer, executor=executor, **options), tokenizer
    raise ValueError(f"backend must be 'local', 'vllm' or 'vllm_colocate', got {backend!r}")


def _local_backend(
    model_dir: str | Path,
    policy: Any,
    tokenizer: Any,
    max_batch_rows: int,
    sampling_dtype: str | None,
    executor: concurrent.futures.Executor | None,
) -> LocalBackend:
    """transformers in this process: sampling from ``policy`` with ``tokenizer``, or, without a policy, from
    ``model_dir`` loaded on the CPU in float32."""
    from envs.backends.local import LocalBackend

    if policy is None:
        return LocalBackend.from_pretrained(
            str(model_dir),
            max_batch_rows=max_batch_rows,
            sampling_dtype=sampling_dtype,
            executor=executor,
        )
    return LocalBackend(
        policy,
        tokenizer,
        max_batch_rows=max_batch_rows,
        sampling_dtype=sampling_dtype,
        executor=executor,
    )


def _tokenizer_for(model_dir: str | Path, tokenizer: Any) -> Any:
    """``tokenizer``, or, when None, ``model_dir``'s (what a vLLM backend samples with)."""
    if tokenizer is not None:
        return tokenizer
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))
