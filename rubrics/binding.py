"""How a reward function's arguments are bound: worked out once, when the function is registered.

A reward function names what it wants; the rubric injects it by name. Individual functions may ask for
``prompt``, ``completion``, ``answer``, ``task``, ``state`` (the seed API's dict) and ``info``, and
``rollout`` (the typed ``rubrics.types.Rollout``) and ``example`` (the dataset example an environment played;
None for a hand-built state); group functions are recognised by
plural names (``prompts``, ``completions``, ...) and may also ask for a singular name, which receives the
value shared by the whole group. Registered class objects (the parser, a scorer, ...) are injected by
their registration name. A function with ``**kwargs`` receives everything.

A required argument that no injectable name satisfies is recorded at registration (``unresolved``); a
class object registered later under that name resolves it (a rubric may register a function first and
the scorer it names second). Scoring refuses to start while one is still unresolved, with an error that
names the function, the argument, what can be injected and the close matches, so a misspelled name never
silently becomes ``None`` and no reward function or judge runs first.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any

SINGULAR_ARGS: tuple[str, ...] = (
    "prompt",
    "completion",
    "answer",
    "task",
    "state",
    "info",
    "rollout",
    "example",
)
"""Per-rollout values a reward function can ask for."""

PLURAL_ARGS: dict[str, str] = {
    "prompts": "prompt",
    "completions": "completion",
    "answers": "answer",
    "tasks": "task",
    "states": "state",
    "infos": "info",
    "rollouts": "rollout",
    "examples": "example",
}
"""Group-level names and the per-rollout value each one collects."""


class RewardFuncBindingError(ValueError):
    """A reward function asks for an argument the rubric cannot provide."""


@dataclass(frozen=True)
class Binding:
    """The precomputed call plan of one reward function."""

    func: Callable[..., Any]
    """The reward function itself."""
    name: str
    """Unique name inside its rubric: the metric key."""
    is_group: bool
    """True when the function scores a whole group (it asks for a plural name)."""
    is_async: bool
    """True for ``async def`` functions (their calls run concurrently)."""
    params: tuple[str, ...]
    """Names passed explicitly (when the function has no ``**kwargs``)."""
    takes_var_kwargs: bool
    """True when the function has ``**kwargs`` and so receives every injectable value."""
    unresolved: tuple[str, ...] = ()
    """Required arguments that nothing injectable satisfied yet (a class object registered later may)."""

    def resolve(self, class_objects: Collection[str]) -> Binding:
        """This binding with the arguments that ``class_objects`` now provide no longer unresolved."""
        left = tuple(a for a in self.unresolved if a not in class_objects)
        return self if left == self.unresolved else replace(self, unresolved=left)

    def check_resolved(self, class_objects: Collection[str]) -> None:
        """Raise ``RewardFuncBindingError`` if an argument is still unresolved (before scoring starts)."""
        if self.unresolved:
            injectable = (
                set(SINGULAR_ARGS) | set(class_objects) | (set(PLURAL_ARGS) if self.is_group else set())
            )
            raise RewardFuncBindingError(
                _unknown_arg_message(self.name, self.unresolved[0], injectable, self.is_group)
            )


def func_name(func: Callable[..., Any]) -> str:
    """The name a function is known by in metrics."""
    name = getattr(func, "__name__", None) or type(func).__name__
    return str(name)


def bind(func: Callable[..., Any], name: str, class_objects: Collection[str]) -> Binding:
    """Work out how to call ``func``; raise ``RewardFuncBindingError`` if it asks for the impossible."""
    if not callable(func):
        raise RewardFuncBindingError(f"reward function {name!r} is not callable: {func!r}")
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError) as exc:  # builtins without a signature
        raise RewardFuncBindingError(f"cannot read the signature of reward function {name!r}: {exc}") from exc

    params: list[str] = []
    takes_var_kwargs = False
    is_group = False
    for p in signature.parameters.values():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            takes_var_kwargs = True
            continue
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        if p.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise RewardFuncBindingError(
                f"reward function {name!r}: parameter {p.name!r} is positional-only; "
                "arguments are injected by name"
            )
        if p.name in PLURAL_ARGS:
            is_group = True
        params.append(p.name)

    injectable = set(SINGULAR_ARGS) | set(class_objects)
    if is_group:
        injectable |= set(PLURAL_ARGS)
    unresolved: list[str] = []
    for p in signature.parameters.values():
        if p.name not in params or p.name in injectable:
            continue
        if p.default is not inspect.Parameter.empty:
            params.remove(p.name)  # keep its default; never pass it
            continue
        unresolved.append(p.name)  # a class object registered later may provide it; scoring checks

    return Binding(
        func=func,
        name=name,
        is_group=is_group,
        is_async=inspect.iscoroutinefunction(func)
        or inspect.iscoroutinefunction(getattr(func, "__call__", None)),  # noqa: B004
        params=tuple(params),
        takes_var_kwargs=takes_var_kwargs,
        unresolved=tuple(unresolved),
    )


def _unknown_arg_message(func: str, arg: str, injectable: set[str], is_group: bool) -> str:
    kind = "group reward function" if is_group else "reward function"
    message = (
        f"{kind} {func!r} asks for argument {arg!r}, which cannot be injected and has no default. "
        f"Injectable: {', '.join(sorted(injectable))}"
    )
    if not is_group:
        message += f" (group functions may also ask for {', '.join(PLURAL_ARGS)})"
    close = difflib.get_close_matches(arg, sorted(injectable | set(PLURAL_ARGS)), n=1, cutoff=0.75)
    if close:
        message += f". Did you mean {close[0]!r}?"
    else:
        message += (
            f". If {arg!r} is a helper object, register it with "
            f"rubric.add_class_object({arg!r}, obj) or Rubric(class_objects={{{arg!r}: obj}})."
        )
    return message
