"""Chat templates: one that rewrites the history the model saw is reported."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

from transformers import AutoTokenizer

from envs.chat import TemplatePrefixError, chat_ids, next_turn_ids

from .helpers import QUESTION


def test_a_template_that_rewrites_history_is_reported(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    tokenizer.chat_template = (  # drops every assistant message but the last, like templates that strip <think>
        "{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}"
        "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    prompt_ids = chat_ids(tokenizer, QUESTION)
    reply = tokenizer("fifty six", add_special_tokens=False)["input_ids"] + [
        tokenizer.convert_tokens_to_ids("<|im_end|>")
    ]
    messages = [
        *QUESTION,
        {"role": "assistant", "content": "fifty six"},
        {"role": "user", "content": "Sure?"},
    ]
    with pytest.raises(TemplatePrefixError, match="does not extend the tokens the model saw"):
        next_turn_ids(tokenizer, prompt_ids, reply, messages)
