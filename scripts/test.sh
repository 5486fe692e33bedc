#!/usr/bin/env bash
# The test command: lint, format check, type check, import contracts, the test suite (CPU only), then a
# subset of it on the lowest transformers the project accepts (scripts/test_floor.sh).
#   scripts/test.sh               everything (tests marked vllm run where vLLM is installed in .venv)
#   scripts/test.sh -m "not slow" extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || { echo "scripts/test.sh: .venv is missing; run ./install.sh first" >&2; exit 2; }
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 WANDB_MODE=offline \
    VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
echo "== ruff check";  "$PY" -m ruff check .
echo "== ruff format"; "$PY" -m ruff format --check .
echo "== mypy";        "$PY" -m mypy
echo "== import-linter"; .venv/bin/lint-imports --no-cache   # layers train -> envs -> rubrics, no import circles
echo "== pytest";      "$PY" -m pytest "$@"
echo "== floor";       scripts/test_floor.sh -q   # loading, a training step, LoRA, the local backend
