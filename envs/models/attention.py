"""``sdpa_float32``: transformers' SDPA attention run in float32 where a CPU trains under bf16 autocast.

Under autocast the attention's inputs arrive as bf16, and torch's CPU kernel for the backward of bf16
attention is several times slower than its float32 one at the shapes this project trains (SmolLM2's
[4, 9, 130, 64] queries: 14.3 ms against 2.8 ms; ``benchmarks/train_step_memory.py`` measures whole steps,
docs/results.md). With ``model.attn_implementation: sdpa_float32`` the policy's attention takes its
query, key and value in float32 whenever it runs on a CPU under autocast with gradients on; everywhere else
(inference, float32 training, a GPU) it is exactly ``sdpa``. The values differ from bf16 attention by
rounding only: float32 is the more exact of the two.
"""

from __future__ import annotations

from typing import Any

NAME = "sdpa_float32"
"""The ``attn_implementation`` this module registers with transformers."""


def register() -> None:
    """Make ``NAME`` an attention implementation (and its mask SDPA's) for models loaded from now on."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, float32_sdpa)
    AttentionMaskInterface.register(NAME, sdpa_mask)


def float32_sdpa(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any
) -> tuple[Any, Any]:
    """transformers' ``sdpa_attention_forward``, with autocast off and float32 inputs when it runs on a
    CPU under autocast with gradients on; the output stays float32 (the next projection casts it)."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    device = query.device.type
    if device != "cpu" or not torch.is_autocast_enabled(device) or not torch.is_grad_enabled():
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        attention_mask = attention_mask.float()
    with torch.autocast(device, enabled=False):
        return sdpa_attention_forward(
            module, query.float(), key.float(), value.float(), attention_mask, **kwargs
        )
