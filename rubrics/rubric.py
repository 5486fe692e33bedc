"""``Rubric``: weighted reward functions with arguments injected by name (``rubrics.binding``).

Scoring contract (what ``score_rollouts`` writes into each ``Rollout``, and ``score_rollout`` and
``score_group`` into each hand-built state, the seed API's dict):

- ``reward``: the weighted sum of every reward function's value.
- ``metrics``: every function's raw value by name, weight-0 metrics included.
- ``timing["scoring_ms"]``: wall time of the scoring call.
- ``state["advantage"]`` (``score_group`` only): reward minus the mean reward of the group's healthy rollouts
  (``rubrics.advantages.group_advantages``). ``score_rewards`` scores a group of states without it;
  environments score their typed rollouts with ``score_rollouts`` and leave advantages to the caller, who
  computes them over several groups at once (the trainer's step).

Error policy: a reward function that raises (or returns something that is not a number) does not crash
the batch and is not scored as a bad answer. The rollout is marked: ``state["error"]`` names the function
and the message, ``metrics["errors/<name>"]`` is 1.0, the function's metric and the reward are NaN, and
the advantage is 0.0. Errored rollouts are left out of the group's baseline (and, in training, the loss).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

from rubrics.advantages import group_advantages
from rubrics.binding import PLURAL_ARGS, SINGULAR_ARGS, Binding, bind, func_name
from rubrics.parsers import Parser
from rubrics.types import RewardFunc, RewardWithMetrics, Rollout, State

ERROR_PREFIX = "errors/"


@dataclass
class RolloutScore:
    """The outcome of scoring one rollout, before it is written into the state."""

    values: dict[str, float] = field(default_factory=dict)
    """Raw value of each reward function and metric by name (NaN where the function errored)."""
    reward: float = 0.0
    """Weighted sum of ``values``; NaN when any function errored."""
    errors: list[str] = field(default_factory=list)
    """One message per failed function: ``"<name>: <ExceptionType>: <message>"``."""


class ScoringError(RuntimeError):
    """A reward function failed on a rollout (kept as a message on the state, never raised to the batch)."""


class Rubric:
    """Weighted reward functions that turn rollouts into rewards and metrics."""

    def __init__(
        self,
        funcs: Sequence[RewardFunc] | None = None,
        weights: Sequence[float] | None = None,
        parser: Parser | None = None,
        class_objects: dict[str, Any] | None = None,
    ) -> None:
        funcs = list(funcs or [])
        weights = [1.0] * len(funcs) if weights is None else list(weights)
        if len(funcs) != len(weights):
            raise ValueError(
                f"Rubric got {len(funcs)} reward functions but {len(weights)} weights; "
                "pass one weight per function (or none for 1.0 each)"
            )
        self.parser: Parser = parser if parser is not None else Parser()
        self.class_objects: dict[str, Any] = {"parser": self.parser}
        self._bindings: list[Binding] = []
        self._weights: list[float] = []
        for name, obj in (class_objects or {}).items():
            self.add_class_object(name, obj)
        for func, weight in zip(funcs, weights, strict=True):
            self.add_reward_func(func, weight)

    # -- registration -------------------------------------------------------------------------------

    @property
    def funcs(self) -> list[RewardFunc]:
        """The registered reward functions and metrics, in registration order."""
        return [b.func for b in self._bindings]

    @property
    def weights(self) -> list[float]:
        """One weight per function in ``funcs`` (0.0 for metrics)."""
        return list(self._weights)

    def add_reward_func(self, func: RewardFunc, weight: float = 1.0) -> None:
        """Register a reward function; its arguments are bound now. One that nothing injectable provides is
        left unresolved until a class object of that name is registered; scoring refuses to start before."""
        if not isinstance(weight, Real) or not math.isfinite(float(weight)):
            raise ValueError(f"weight of reward function {func_name(func)!r} must be a finite number")
        name = self._unique_name(func_name(func))
        self._bindings.append(bind(func, name, self.class_objects))
        self._weights.append(float(weight))

    def add_metric(self, func: RewardFunc, weight: float = 0.0) -> None:
        """Register a function that is tracked in metrics but (by default) adds nothing to the reward."""
        self.add_reward_func(func, weight)

    def add_class_object(self, name: str, obj: Any) -> None:
        """Make ``obj`` available to reward functions as the argument ``name``."""
        if not name.isidentifier():
            raise ValueError(f"class object name {name!r} is not a valid Python identifier")
        if name in SINGULAR_ARGS or name in PLURAL_ARGS:
            raise ValueError(f"class object name {name!r} collides with an injected rollout argument")
        self.class_objects[name] = obj
        if name == "parser":
            self.parser = obj
        self._bindings = [b.resolve(self.class_objects) for b in self._bindings]

    def check_bindings(self) -> None:
        """Raise ``RewardFuncBindingError`` if a reward function still asks for an argument nothing provides
        (a misspelling, or a class object never registered); scoring calls it before anything runs."""
        for binding in self._bindings:
            binding.check_resolved(self.class_objects)

    def _unique_name(self, name: str) -> str:
        taken = {b.name for b in self._bindings}
        if name not in taken:
            return name
        i = 2
        while f"{name}_{i}" in taken:
            i += 1
        return f"{name}_{i}"

    def _get_reward_func_names(self) -> list[str]:
        return [b.name for b in self._bindings]

    def _get_reward_funcs(self) -> list[RewardFunc]:
        return self.funcs

    def _get_reward_weights(self) -> list[float]:
        return self.weights

    def _has_group_funcs(self) -> list[str]:
        return [b.name for b in self._bindings if b.is_group]

    def _asks_for_state(self) -> bool:
        """Whether a function asks for the seed API's ``state`` dict (by name, plural, or ``**kwargs``)."""
        return any(b.takes_var_kwargs or {"state", "states"} & set(b.params) for b in self._bindings)

    # -- scoring ------------------------------------------------------------------------------------

    async def score_rollout(self, state: State) -> None:
        """Score one hand-built state with the individual reward functions; updates ``state`` in place."""
        group_funcs = self._has_group_funcs()
        if group_funcs:
            raise ValueError(
                f"score_rollout cannot run group reward functions ({', '.join(group_funcs)}); "
                "they need the whole group: use score_group(states)"
            )
        await self._score_hand_built([state], group=False)

    async def score_group(self, states: list[State]) -> None:
        """Score a group of hand-built states of one prompt with every function; sets rewards and advantages
        (reward minus the group's mean, ``group_advantages`` unscaled)."""
        rollouts = await self._score_hand_built(states, group=True)
        rewards_G = [math.nan if r.reward is None else r.reward for r in rollouts]
        errored_G = [bool(r.error) for r in rollouts]
        advantages_G = group_advantages(rewards_G, errored_G, "none").advantages_G
        for state, advantage in zip(states, advantages_G, strict=True):
            state["advantage"] = advantage

    async def score_rewards(self, states: list[State]) -> None:
        """Score a group of hand-built states of one prompt with every function (group functions included);
        sets rewards, metrics and timing, not advantages."""
        await self._score_hand_built(states, group=True)

    async def _score_hand_built(self, states: list[State], group: bool) -> list[Rollout]:
        """Score ``states`` as rollouts, their reward functions given the states' own keys; write each score
        back into its state, and return the rollouts."""
        rollouts = [Rollout.from_state(s) for s in states]
        injectables = [self._state_injectables(s, r) for s, r in zip(states, rollouts, strict=True)]
        await self._score_group(rollouts, injectables, group)
        for state, rollout in zip(states, rollouts, strict=True):
            rollout.write_score_into(state)
        return rollouts

    async def score_rollouts(self, rollouts: Sequence[Rollout], example: Any = None) -> None:
        """Score a group of rollouts of one example (``example``, injected by that name) with every function,
        group functions included; sets their rewards, metrics and timing, not advantages."""
        await self._score_group(list(rollouts), [self._injectables(r, example) for r in rollouts], True)

    async def _score_group(
        self, rollouts: list[Rollout], injectables: list[dict[str, Any]], group: bool
    ) -> None:
        if not rollouts:
            return
        start = time.perf_counter()
        scores = await self._score_states(injectables, group=group)
        elapsed_ms = (time.perf_counter() - start) * 1000.0
        for rollout, score in zip(rollouts, scores, strict=True):
            write_score(rollout, score, elapsed_ms)

    async def _score_states(self, per_rollout: Sequence[dict[str, Any]], group: bool) -> list[RolloutScore]:
        """Run every function over the rollouts whose injectable values are ``per_rollout`` (this rubric's
        class objects added); returns one score per rollout and mutates nothing."""
        self.check_bindings()
        kwargs_per_state = [{**injectables, **self.class_objects} for injectables in per_rollout]
        n = len(kwargs_per_state)
        values: list[dict[str, float]] = [{} for _ in range(n)]
        errors: list[list[str]] = [[] for _ in range(n)]
        pending: list[Awaitable[None]] = []

        for binding in self._bindings:
            if binding.is_group:
                if not group:
                    raise ValueError(f"{binding.name!r} is a group reward function; use score_group")
                pending_call = self._run_group(binding, kwargs_per_state, values, errors)
                if pending_call is not None:
                    pending.append(pending_call)
                continue
            for i, injectables in enumerate(kwargs_per_state):
                pending_call = _run_one(binding, _select(binding, injectables), values[i], errors[i])
                if pending_call is not None:
                    pending.append(pending_call)
        if pending:
            await asyncio.gather(*pending)

        weights = dict(zip((b.name for b in self._bindings), self._weights, strict=True))
        scores = []
        for vals, errs in zip(values, errors, strict=True):
            reward = math.nan if errs else math.fsum(weights[k] * v for k, v in vals.items() if k in weights)
            scores.append(RolloutScore(values=vals, reward=reward, errors=errs))
        return scores

    def _state_injectables(self, state: State, rollout: Rollout) -> dict[str, Any]:
        """What a hand-built state offers reward functions: its own keys, as the seed API reads them."""
        return {
            "prompt": state.get("prompt"),
            "completion": state.get("completion"),
            "answer": state.get("answer", ""),
            "task": state.get("task", "default"),
            "state": state,
            "info": state.get("info") or {},
            "rollout": rollout,
            "example": None,
        }

    def _injectables(self, rollout: Rollout, example: Any) -> dict[str, Any]:
        """What a typed rollout offers reward functions (``state``: its dict form, made only for a function
        of the seed API's that asks for it)."""
        return {
            "prompt": rollout.prompt,
            "completion": rollout.completion,
            "answer": rollout.answer,
            "task": rollout.task,
            "state": rollout.to_state() if self._asks_for_state() else None,
            "info": rollout.info,
            "rollout": rollout,
            "example": example,
        }

    def _run_group(
        self,
        binding: Binding,
        per_state: Sequence[dict[str, Any]],
        values: list[dict[str, float]],
        errors: list[list[str]],
    ) -> Awaitable[None] | None:
        try:
            kwargs = self._group_kwargs(binding, per_state)
        except ScoringError as exc:
            _record_group_failure(binding.name, str(exc), values, errors)
            return None

        def finish(result: Any) -> None:
            try:
                floats = _as_group_result(binding.name, result, len(per_state))
            except ScoringError as exc:
                _record_group_failure(binding.name, str(exc), values, errors)
                return
            for vals, value in zip(values, floats, strict=True):
                vals[binding.name] = value

        if binding.is_async:

            async def run() -> None:
                try:
                    result = await binding.func(**kwargs)
                except Exception as exc:
                    _record_group_failure(binding.name, _describe(exc), values, errors)
                    return
                finish(result)

            return run()
        try:
            result = binding.func(**kwargs)
        except Exception as exc:
            _record_group_failure(binding.name, _describe(exc), values, errors)
            return None
        finish(result)
        return None

    def _group_kwargs(self, binding: Binding, per_state: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Keyword arguments of a group function from each state's injectable values (built once per call)."""
        names = (
            list(PLURAL_ARGS) + list(SINGULAR_ARGS) + list(self.class_objects)
            if binding.takes_var_kwargs
            else binding.params
        )
        kwargs: dict[str, Any] = {}
        for name in names:
            if name in PLURAL_ARGS:
                kwargs[name] = [inj[PLURAL_ARGS[name]] for inj in per_state]
            elif name in self.class_objects:
                kwargs[name] = self.class_objects[name]
            elif name in SINGULAR_ARGS:
                shared = _shared_value(name, [inj[name] for inj in per_state])
                if shared is _NOT_SHARED:
                    if name in binding.params:
                        raise ScoringError(
                            f"asks for {name!r} (singular) but its value differs across the group; "
                            f"ask for {name + 's'!r} to get one value per rollout"
                        )
                    continue  # only reachable through **kwargs: leave it out rather than guess
                kwargs[name] = shared
        return kwargs


_NOT_SHARED = object()


def _shared_value(name: str, items: list[Any]) -> Any:
    if name in ("state", "rollout"):
        return items[0] if len(items) == 1 else _NOT_SHARED
    first = items[0]
    for item in items[1:]:
        if item is not first and item != first:
            return _NOT_SHARED
    return first


def _select(binding: Binding, injectables: dict[str, Any]) -> dict[str, Any]:
    if binding.takes_var_kwargs:
        return injectables
    return {k: injectables[k] for k in binding.params}


def _run_one(
    binding: Binding, kwargs: dict[str, Any], values: dict[str, float], errors: list[str]
) -> Awaitable[None] | None:
    """Call one individual function; sync ones run now, async ones return an awaitable."""
    if binding.is_async:
        return _await_one(binding, kwargs, values, errors)
    try:
        _store(binding.name, binding.func(**kwargs), values)
    except Exception as exc:
        values[binding.name] = math.nan
        values[ERROR_PREFIX + binding.name] = 1.0
        errors.append(f"{binding.name}: {_describe(exc)}")
    return None


async def _await_one(
    binding: Binding, kwargs: dict[str, Any], values: dict[str, float], errors: list[str]
) -> None:
    try:
        _store(binding.name, await binding.func(**kwargs), values)
    except Exception as exc:
        values[binding.name] = math.nan
        values[ERROR_PREFIX + binding.name] = 1.0
        errors.append(f"{binding.name}: {_describe(exc)}")


def _record_group_failure(
    name: str, message: str, values: list[dict[str, float]], errors: list[list[str]]
) -> None:
    for vals, errs in zip(values, errors, strict=True):
        vals[name] = math.nan
        vals[ERROR_PREFIX + name] = 1.0
        errs.append(f"{name}: {message}")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ScoringError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _store(name: str, result: Any, values: dict[str, float]) -> None:
    if isinstance(result, RewardWithMetrics):
        extras = {k: _as_float(k, v) for k, v in result.metrics.items()}
        values[name] = _as_float(name, result.value)
        values.update(extras)
    else:
        values[name] = _as_float(name, result)


def _as_float(name: str, value: Any) -> float:
    if isinstance(value, Real):
        return float(value)
    raise ScoringError(f"returned {type(value).__name__} {value!r}; a reward function returns a number")


def _as_group_result(name: str, result: Any, n: int) -> list[float]:
    if isinstance(result, str | bytes) or not isinstance(result, Iterable):
        raise ScoringError(
            f"returned {type(result).__name__}; a group reward function returns one number per rollout"
        )
    items = list(result)
    if len(items) != n:
        raise ScoringError(f"returned {len(items)} values for a group of {n} rollouts")
    return [_as_float(name, v) for v in items]


def write_score(rollout: Rollout, score: RolloutScore, scoring_ms: float) -> None:
    """Write one rollout's score into it (reward, metrics, timing, error)."""
    rollout.reward = score.reward
    rollout.metrics = score.values
    timing = rollout.timing
    timing["scoring_ms"] = scoring_ms
    if "generation_ms" in timing:
        timing["total_ms"] = timing["generation_ms"] + scoring_ms
    if score.errors:
        previous = rollout.error
        message = "reward function " + "; reward function ".join(score.errors)
        rollout.error = f"{previous}; {message}" if previous else message
        if rollout.error_cause is None:
            rollout.error_cause = "reward_function"
