"""Token-in/token-out chat bookkeeping.

A turn's prompt ids are the previous prompt ids, the model's completion ids, and the ids of the new
environment messages plus the generation prompt. Model output is never decoded and re-tokenised: only the
environment's own text is tokenised. The suffix is found by rendering the conversation with the chat
template and checking that what the model actually saw (and said) is a prefix of it; a template under
which it is not (one that rewrites earlier turns, such as dropping ``<think>`` blocks) is reported loudly
with ``TemplatePrefixError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rubrics.types import Messages


class TemplatePrefixError(RuntimeError):
    """The chat template does not extend the token stream the model saw; multi-turn training would be
    wrong."""


def chat_ids(tokenizer: Any, messages: Messages, add_generation_prompt: bool = True) -> list[int]:
    """Token ids of a conversation under the tokenizer's chat template."""
    text = render(tokenizer, messages, add_generation_prompt)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def assistant_turns(
    tokenizer: Any, system_prompt: str | None, messages: Sequence[Mapping[str, Any]]
) -> list[tuple[list[int], list[int]]]:
    """For each assistant message of ``messages`` (``system_prompt`` put in front): the ids of the
    conversation before it with the generation prompt, and the ids the template puts after those for the
    message itself, to the end of the conversation rendered up to it (its end-of-turn token included, and
    whatever the template closes a turn with). What a warm start trains on, and what a model would sample.

    Raises:
        TemplatePrefixError: rendering the message does not extend its generation prompt verbatim."""
    conversation: list[dict[str, Any]] = (
        [{"role": "system", "content": system_prompt}] if system_prompt else []
    )
    turns = []
    for message in messages:
        before = [*conversation]
        conversation.append(dict(message))
        if message["role"] != "assistant":
            continue
        prompt = chat_ids(tokenizer, before, add_generation_prompt=True)
        upto = chat_ids(tokenizer, conversation, add_generation_prompt=False)
        if upto[: len(prompt)] != prompt:
            raise TemplatePrefixError("the chat template does not extend the earlier turns verbatim")
        turns.append((prompt, upto[len(prompt) :]))
    return turns


def render(tokenizer: Any, messages: Messages, add_generation_prompt: bool) -> str:
    """The conversation as text under the chat template."""
    text = tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=add_generation_prompt
    )
    if not isinstance(text, str):
        raise TypeError(f"chat template rendered {type(text).__name__}, expected text")
    return text


def next_turn_ids(
    tokenizer: Any,
    prompt_ids: list[int],
    completion_ids: list[int],
    messages: Messages,
) -> list[int]:
    """The ids to append after ``prompt_ids + completion_ids`` so that the model sees ``messages`` (which end
    with the environment's new messages) followed by the generation prompt."""
    seen = tokenizer.decode(
        prompt_ids + completion_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
    )
    full = render(tokenizer, messages, add_generation_prompt=True)
    if not full.startswith(seen):
        at = next(
            (i for i, (a, b) in enumerate(zip(seen, full, strict=False)) if a != b), min(len(seen), len(full))
        )
        raise TemplatePrefixError(
            "the chat template does not extend the tokens the model saw: re-rendering the conversation "
            f"changes it at character {at} (seen {seen[at : at + 40]!r}, template {full[at : at + 40]!r}). "
            "Use a template that keeps earlier turns verbatim (e.g. one that does not drop <think> blocks)."
        )
    suffix = full[len(seen) :]
    return list(tokenizer(suffix, add_special_tokens=False)["input_ids"])
