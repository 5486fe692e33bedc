#!/usr/bin/env bash
# The lowest transformers the project accepts (pyproject.toml's train extra, the floor that vLLM sets) on a
# subset of the tests: loading a model, a training step, LoRA, the local backend and a short trainer run.
#   scripts/test_floor.sh          extra arguments go to pytest
# The floor's transformers (and a huggingface_hub it accepts) go into .venv-floor/ with --no-deps, and that
# folder comes first on PYTHONPATH; .venv is left as it is. First run: about 20 s to install.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || { echo "scripts/test_floor.sh: .venv is missing; run ./install.sh first" >&2; exit 2; }
FLOOR=$("$PY" -c 'import tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["train"]
print(next(d.split(">=")[1] for d in deps if d.startswith("transformers>=")))')
# transformers before 5.19 requires huggingface_hub below 2.0
HUB="huggingface_hub>=1.5,<2"
if ! [ -f ".venv-floor/transformers-$FLOOR.dist-info/METADATA" ]; then
    rm -rf .venv-floor
    echo "== installing transformers==$FLOOR and $HUB into .venv-floor"
    "$PY" -m pip install --quiet --no-deps --target .venv-floor "transformers==$FLOOR" "$HUB"
fi
export PYTHONPATH="$PWD/.venv-floor" HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 \
    WANDB_MODE=offline DO_NOT_TRACK=1
"$PY" -c "import transformers, sys
sys.exit(0 if transformers.__version__ == '$FLOOR' else f'the floor is not in effect: {transformers.__version__}')"
echo "== pytest with transformers $FLOOR"
"$PY" -m pytest \
    tests/envs/models/test_tiny.py \
    tests/envs/backends/test_decode.py \
    tests/train/test_step.py \
    tests/train/test_lora.py \
    tests/train/test_no_hub_code.py \
    tests/train/test_trainer.py::test_multistep_run_logs_everything_and_reports \
    tests/train/test_trainer.py::test_sampling_copy_follows_the_policy \
    tests/train/test_trainer.py::test_gradient_checkpointing_without_the_deprecated_call \
    "$@"
