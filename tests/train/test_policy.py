"""train.policy.adamw: torch's fused AdamW where it has a kernel for every weight, the same update."""

from __future__ import annotations

import torch

from train.policy import adamw


def _weights(dtype: torch.dtype = torch.float32, device: str = "cpu") -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(0)
    return [
        torch.nn.Parameter(torch.randn(shape, generator=generator).to(device=device, dtype=dtype))
        for shape in ((16, 8), (8,))
    ]


def test_cpu_float_weights_get_the_fused_kernel_and_the_same_update() -> None:
    fused_params, plain_params = _weights(), _weights()
    fused = adamw(fused_params, 1e-2, (0.9, 0.99), 0.01)
    plain = torch.optim.AdamW(plain_params, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.01)
    assert fused.defaults["fused"] is True and plain.defaults["fused"] is None
    for step in range(3):
        generator = torch.Generator().manual_seed(step)
        grads = [torch.randn(p.shape, generator=generator) for p in fused_params]
        for params, optimizer in ((fused_params, fused), (plain_params, plain)):
            for p, g in zip(params, grads, strict=True):
                p.grad = g.clone()
            optimizer.step()
    for a, b in zip(fused_params, plain_params, strict=True):
        assert not torch.equal(a, _weights()[0 if a.dim() == 2 else 1])  # the weights moved
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_weights_without_a_fused_kernel_keep_the_default() -> None:
    assert adamw(_weights(device="meta"), 1e-2, (0.9, 0.99), 0.0).defaults["fused"] is None
    assert adamw(_weights(dtype=torch.float64), 1e-2, (0.9, 0.99), 0.0).defaults["fused"] is None
