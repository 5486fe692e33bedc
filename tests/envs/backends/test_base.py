"""``envs.backends.base``: the weight source of a policy held by one process."""

from __future__ import annotations

import torch

from envs.backends.base import OneProcessWeights, WeightSource


def test_one_process_weights_is_a_weight_source_of_the_module_itself() -> None:
    module = torch.nn.Linear(3, 2)
    weights = OneProcessWeights(module)
    assert isinstance(weights, WeightSource)
    assert weights.is_main and weights.module is module
    state = weights.full_state_dict()
    assert set(state) == {"weight", "bias"}
    with torch.no_grad():
        module.weight.add_(1.0)  # the state dict is the module's, not a copy taken earlier
    assert torch.equal(state["weight"], module.weight)
    assert weights.barrier() is None
