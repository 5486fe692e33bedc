"""Inference backends: the local (in-process transformers) backend and the vLLM server backend."""

from envs.backends.base import BackendError, InferenceBackend, Sample, SamplingParams
from envs.backends.local import LocalBackend

__all__ = ["BackendError", "InferenceBackend", "LocalBackend", "Sample", "SamplingParams"]
