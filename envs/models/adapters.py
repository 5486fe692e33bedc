"""A LoRA-adapted policy (a peft ``PeftModel``) as the things that need plain weights see it: the merged
weights ``W + B @ A * alpha / r`` under the base architecture's parameter names.

The local backend samples from a plain copy of the architecture into which these are copied once per
optimiser step (a plain forward is faster than peft's, which runs every adapter beside its layer), and the
final ``model/`` of a run is saved from them, so that ``eval`` and ``serve`` load an ordinary model folder.
Only adapters on ``nn.Linear`` layers are merged here (``train.lora`` adapts nothing else). peft itself is
imported only by whoever builds the adapted model.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def is_adapted(model: Any) -> bool:
    """Whether ``model`` (unwrapped) is a peft model with adapters (``get_base_model``, ``peft_config``)."""
    return hasattr(model, "peft_config") and callable(getattr(model, "get_base_model", None))


def merged_weights(model: Any) -> Iterator[tuple[str, Any]]:
    """Every parameter of the plain model, ``(name, tensor)`` in the base architecture's names, one at a time:
    an adapted linear layer's weight merged with its active adapter (a new tensor in the weight's dtype),
    every other parameter as it is (the frozen tensor itself, not a copy). A tied output head is yielded
    under both of its names, as ``state_dict`` does."""
    base = model.get_base_model()
    (adapter,) = _active_adapters(model)
    inside: str | None = None  # the prefix of the adapted layer whose submodules are being skipped
    for name, module in base.named_modules():
        prefix = f"{name}." if name else ""
        if inside is not None and prefix.startswith(inside):
            continue
        inside = None
        if adapter in getattr(module, "lora_A", {}):
            inside = prefix
            yield f"{prefix}weight", merged_weight(module, adapter)
            if module.base_layer.bias is not None:
                yield f"{prefix}bias", module.base_layer.bias
            continue
        for pname, param in module.named_parameters(recurse=False):
            yield prefix + pname, param


def merged_weight(layer: Any, adapter: str) -> Any:
    """``W + B @ A * scaling`` of one peft LoRA linear layer, computed in float32, in ``W``'s dtype."""
    import torch

    weight_OI = layer.base_layer.weight  # [out, in]
    if not isinstance(layer.base_layer, torch.nn.Linear) or getattr(layer, "fan_in_fan_out", False):
        raise TypeError(
            f"only LoRA on nn.Linear layers is merged here, not on {type(layer.base_layer).__name__}"
        )
    a_RI = layer.lora_A[adapter].weight  # [r, in]
    b_OR = layer.lora_B[adapter].weight  # [out, r]
    with torch.no_grad():
        delta_OI = (b_OR.float() @ a_RI.float()) * layer.scaling[adapter]
        return (weight_OI.float() + delta_OI).to(weight_OI.dtype)


def merged_state_dict(model: Any) -> dict[str, Any]:
    """``merged_weights`` as a state dict of the plain architecture (for ``save_pretrained``)."""
    return dict(merged_weights(model))


def plain_copy(model: Any) -> Any:
    """A new plain model of the adapted ``model``'s architecture holding its merged weights (the adapted
    layers replaced by plain ones)."""
    import copy

    return copy.deepcopy(model).merge_and_unload()


def _active_adapters(model: Any) -> list[str]:
    active = getattr(model, "active_adapters", None)
    names = list(active() if callable(active) else active or [])
    if len(names) != 1:
        raise ValueError(f"expected one active adapter, got {names}")
    return names
