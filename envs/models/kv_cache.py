"""The name of a forward pass's KV cache, which transformers changed: ``past_key_values`` in 5.16.1 and
5.19.0 (what vLLM accepts), ``cache`` in 5.25 (which takes ``past_key_values`` only as a deprecated
argument). Decoding passes and reads the cache under ``cache_name()``, the name of the output's field in the
installed version, so one code runs on both (``docs/architecture.md``, One transformers range with vLLM)."""

from __future__ import annotations

import functools


@functools.cache
def cache_name() -> str:
    """``cache`` or ``past_key_values``: the keyword a causal LM's forward takes its KV cache by and the
    attribute its output returns it in, under the installed transformers."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"
