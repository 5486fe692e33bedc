"""The environment's settings: a pydantic model with a docstring per field; it imports without torch.

``EnvConfig`` is the ``env`` section of a run config (``train.config.TrainConfig``) and the environment of a
``rubric-grpo eval`` job (``envs.evaluation.job``); ``envs.build.make_env`` builds the environment from it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    from rubrics.judges.endpoint import JudgeEndpoint


class Section(BaseModel):
    """Base: unknown fields are errors, values are checked on assignment, no NaN or infinity."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class ScaffoldConfig(Section):
    """Rubric scaffolding (RuscaRL): during training, some of an example's positive criteria are shown to the
    policy in its prompt as hints, a share that decays over the run; held-out evaluation never shows them
    (``envs.criteria.scaffold``, ``docs/training.md``, Rubric scaffolding)."""

    share_start: float = Field(1.0, ge=0.0, le=1.0)
    """The share of an example's positive criteria shown at the first step (the most hinted rollout's, under
    ``per_rollout: graded``)."""
    share_end: float = Field(0.0, ge=0.0, le=1.0)
    """The share shown once the decay is over (at most ``share_start``)."""
    schedule: Literal["sigmoid", "linear"] = "sigmoid"
    """How the share falls from ``share_start`` to ``share_end``: a straight line, or RuscaRL's sigmoid (flat
    at first, steepest half-way through the decay, flat at its end)."""
    decay_fraction: float = Field(1.0, gt=0.0, le=1.0)
    """The share of the run's steps the decay takes: it reaches ``share_end`` at step
    ``decay_fraction * (max_steps - 1)`` and stays there."""
    per_rollout: Literal["graded", "same"] = "graded"
    """``graded``: rollout ``i`` of a group of ``G`` gets ``i / (G - 1)`` of the step's share (RuscaRL's
    intra-group differentiation: the first rollout of every group sees no hint, the last the whole share);
    ``same``: every rollout gets the step's share."""

    @model_validator(mode="after")
    def _decays(self) -> ScaffoldConfig:
        if self.share_end > self.share_start:
            raise ValueError(
                f"env.scaffold.share_end: {self.share_end} is above share_start {self.share_start}; "
                "the share shown decays"
            )
        return self


class EnvConfig(Section):
    """The environment and its data."""

    type: Literal["multistep", "single_turn", "criteria"] = "multistep"
    """``multistep``: the progressive-reveal environment on a multi-step rubric; ``single_turn``: one reply
    per prompt of ``data``, scored by the rubric ``rubric`` names as ``module:attribute``; ``criteria``: one
    reply per prompt of ``data``, graded against that prompt's own weighted criteria (RaR, HealthBench, the
    project's format; ``docs/criteria_data.md``)."""
    rubric: str = "configs/rubrics/first_responder.yaml"
    """Multi-step rubric YAML (``multistep``), or ``module:attribute`` of a Rubric (``single_turn``)."""
    scenarios: str = "configs/scenarios/first_responder.yaml"
    """Scenario YAML/JSONL (``multistep``), or a ``rubric-grpo synth`` output folder (its
    ``scenarios.yaml``)."""
    data: str | None = None
    """JSONL of examples with ``prompt`` and optional ``answer`` (``single_turn``); a criteria dataset
    (``criteria``): JSONL, JSON, parquet, or a folder written by ``datasets`` or downloaded from a dataset
    repository."""
    eval_data: str | None = None
    """A held-out criteria dataset (``criteria``), evaluated before and after training and never trained on;
    when set, every example of ``data`` is trained on and ``eval_fraction`` is not used."""
    format: Literal["auto", "native", "healthbench", "rar"] = "auto"
    """The criteria datasets' format (``criteria``); ``auto`` detects it from the first record."""
    data_split: str | None = None
    """The split to read from a ``datasets`` folder or a dataset repository (``criteria``)."""
    grader: Literal["per_criterion", "one_shot", "holistic"] = "per_criterion"
    """The LLM autograder of the criteria without a rule (``criteria``): one call per criterion, one call
    for all of a reply's criteria, or one 0-100 score for the whole rubric."""
    clip_reward: bool = True
    """The reward of a criteria rollout (``criteria``): the seed formula's score, clipped to [0, 1] per
    rollout (``true``), or HealthBench's per-example score, the points met over the positive points,
    unclipped, so that a reply whose pitfalls outweigh what it earned scores below 0 (``false``). Rubrics
    without positive points keep the all-negative rule either way (``docs/criteria_data.md``, Scores)."""
    show_reference: bool = True
    """Show an example's reference answer to the LLM judge (``criteria``); never to the policy."""
    judge_concurrency: int = Field(32, ge=1)
    """Judge requests in flight at once, for the whole run (``criteria``): the judge's
    ``JudgeEndpoint.max_concurrency``, whose default it keeps (a test holds them equal)."""
    judge_timeout_s: float = Field(60.0, gt=0, allow_inf_nan=False)
    """Seconds allowed for one judge request (``criteria``): a slower answer is a ``timeout`` fault, retried
    like a dropped connection. The judge's ``JudgeEndpoint.timeout_s``, whose default it keeps."""
    judge_max_attempts: int = Field(5, ge=1)
    """Attempts per verdict, the first included (``criteria``): a criterion still without a verdict after
    the last one errors its rollout, never scores it UNMET. The judge's ``JudgeEndpoint.max_attempts``,
    whose default it keeps."""
    judge_api_key_env: str | None = None
    """The environment variable holding the judge's API key (``criteria``; none for a local vLLM judge): the
    judge's ``JudgeEndpoint.api_key_env``."""
    judge: str | None = None
    """Override the rubric's default judge (``rules`` offline, ``llm`` with a judge server)."""
    judge_base_url: str | None = None
    """The ``JudgeEndpoint.base_url`` of the judge in use (an LLM judge; required for a criteria LLM judge,
    else it overrides the rubric's), e.g. ``http://judge-host:8001/v1``."""
    judge_model: str | None = None
    """The ``JudgeEndpoint.model`` of the judge in use (an LLM judge; required with ``judge_base_url`` for a
    criteria LLM judge, else it overrides the rubric's)."""
    eval_scenarios: str | None = None
    """Held-out scenario YAML/JSONL (``multistep``): evaluated before and after training, never trained on;
    when set, every scenario of ``scenarios`` is trained on and ``eval_fraction`` is not used."""
    extra_eval_scenarios: dict[str, str] = Field(default_factory=dict)
    """Further held-out sets (``multistep``), a name (lower-case letters, digits, ``_``) to a scenario file:
    each is evaluated whenever the held-out set is, on its own (``eval_before_<name>/``,
    ``eval_step_<k>_<name>/``, ``eval_after_<name>/``; metrics ``eval_<name>/...`` and
    ``eval_final_<name>/...``), e.g. conditions that no training scenario has."""
    eval_fraction: float = Field(0.25, ge=0.0, lt=1.0)
    """Share of scenarios held out for evaluation (without ``eval_scenarios``)."""
    split_seed: int = 0
    """Seed of the train/eval split."""
    system_prompt: str | None = None
    """The policy's system prompt (None: the environment's default)."""
    max_turns: int = Field(4, ge=1)
    """Model replies per rollout."""
    max_total_tokens: int = Field(1024, ge=16)
    """Token budget of one rollout (prompt, replies and reveals)."""
    scaffold: ScaffoldConfig | None = None
    """Rubric scaffolding of training prompts (``criteria``): some positive criteria shown as hints, a share
    that decays over the run; None (the default): no hints."""

    def input_files(self) -> list[tuple[str, str, bool]]:
        """``(field, path, a folder will do)`` for every file this environment reads."""
        if self.type in ("criteria", "single_turn"):
            assert self.data is not None  # checked by the validator
            folder = self.type == "criteria"  # a datasets folder or a dataset repository
            named = [("env.data", self.data, folder)]
            if self.type == "criteria" and self.eval_data:
                named.append(("env.eval_data", self.eval_data, True))
            return named
        named = [("env.rubric", self.rubric, False), ("env.scenarios", self.scenarios, True)]
        if self.eval_scenarios:
            named.append(("env.eval_scenarios", self.eval_scenarios, True))
        named += [(f"env.extra_eval_scenarios.{k}", v, True) for k, v in self.extra_eval_scenarios.items()]
        return named

    def judge_overrides(self) -> dict[str, str]:
        """The ``JudgeEndpoint`` fields this config sets on a rubric's judge in use (``judge_base_url`` and
        ``judge_model`` as ``base_url`` and ``model``), those not given left out."""
        named = {"base_url": self.judge_base_url, "model": self.judge_model}
        return {field: value for field, value in named.items() if value is not None}

    def criteria_judge_endpoint(self) -> JudgeEndpoint | None:
        """The endpoint of a criteria environment's LLM judge; None without ``judge_base_url``."""
        from rubrics.judges.endpoint import JudgeEndpoint  # here, so that the config imports no HTTP client

        if self.judge_base_url is None or self.judge_model is None:
            return None
        return JudgeEndpoint(
            base_url=self.judge_base_url,
            model=self.judge_model,
            api_key_env=self.judge_api_key_env,
            max_concurrency=self.judge_concurrency,
            timeout_s=self.judge_timeout_s,
            max_attempts=self.judge_max_attempts,
        )

    @model_validator(mode="after")
    def _single_turn_inputs(self) -> EnvConfig:
        if self.type == "criteria":
            if not self.data:
                raise ValueError("env.data: a criteria environment needs a dataset of prompts with criteria")
            if self.extra_eval_scenarios:
                raise ValueError(
                    "env.extra_eval_scenarios: held-out scenario sets are for multistep environments"
                )
            if (self.judge_base_url is None) != (self.judge_model is None):
                raise ValueError(
                    "env.judge_base_url: a criteria LLM judge needs both judge_base_url and judge_model"
                )
        elif self.scaffold is not None:
            raise ValueError(f"env.scaffold: hints are a criteria environment's criteria, not {self.type}'s")
        if self.type != "criteria" and not self.clip_reward:
            raise ValueError(
                f"env.clip_reward: only a criteria environment's reward can be unclipped, not {self.type}'s"
            )
        if self.type == "single_turn":
            if not self.data:
                raise ValueError("env.data: a single_turn environment needs a JSONL of prompts")
            if ":" not in self.rubric:
                raise ValueError("env.rubric: a single_turn environment names its rubric as module:attribute")
            if self.extra_eval_scenarios:
                raise ValueError(
                    "env.extra_eval_scenarios: held-out scenario sets are for multistep environments"
                )
        if self.extra_eval_scenarios and not self.eval_scenarios and self.eval_fraction == 0:
            raise ValueError(
                "env.extra_eval_scenarios: they are evaluated with the held-out set, and there is none"
            )
        for name in self.extra_eval_scenarios:
            if not re.fullmatch(r"[a-z0-9_]+", name):
                raise ValueError(f"env.extra_eval_scenarios: {name!r} is not a set name (a-z, 0-9 and _)")
        return self
