#!/usr/bin/env python
"""Serve a model with vLLM for RL (dev-mode control routes, weight reloads, trainer-convention logprobs).

    .venv/bin/python scripts/serve_vllm.py MODEL_DIR [--host 127.0.0.1] [--port 8000] [-- VLLM_FLAGS...]

Thin launcher over :func:`envs.serving.launch.serve`; see that module for the flags it passes.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in args_in:
        cut = args_in.index("--")
        args_in, extra = args_in[:cut], args_in[cut + 1 :]
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", help="model folder to serve")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--dtype", default=None, help="default: float32 on CPU hosts, auto on CUDA hosts")
    parser.add_argument("--log", default=None, help="server log file (default: a temporary file)")
    args = parser.parse_args(args_in)

    from envs.serving.launch import serve

    return serve(
        args.model,
        host=args.host,
        port=args.port,
        extra_args=extra,
        max_model_len=args.max_model_len,
        dtype=args.dtype,
        log_path=args.log,
    )


if __name__ == "__main__":
    sys.exit(main())
