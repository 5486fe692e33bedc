#!/usr/bin/env bash
# The GPU check: the `gpu` tests, then the GPU benchmark (benchmarks/rollout_step.py: the main job's rollout
# shape on randomly initialised SmolLM2-135M and Qwen2.5-1.5B architectures), as one JSON on stdout, with the
# slope of the host's and the GPU's memory over the benchmark's steps (memory_gib_per_step).
# Needs no network; finishes within 8 minutes (each part has its own time limit).
#   scripts/gpu_check.sh                       on a CUDA host, after ./install.sh
#   GPU_CHECK_ARCHS=tiny scripts/gpu_check.sh  a dry run of the script itself (e.g. on a CPU)
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 USE_HUB_KERNELS=NO TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
OUT="$(mktemp -d)"
ARCHS="${GPU_CHECK_ARCHS:-smollm2-135m qwen2.5-1.5b}"

timeout 150 "$PY" -m pytest -m gpu tests/train/test_gpu.py tests/envs/serving/test_transfer_gpu.py -q -p no:cacheprovider \
    --junitxml="$OUT/tests.xml" >"$OUT/tests.log" 2>&1
echo "$?" >"$OUT/tests.rc"
for arch in $ARCHS; do
    case "$arch" in
        qwen2.5-1.5b) args=(--steps 2 --no-eval) limit=120 ;;  # the larger model: the steps only
        *) args=(--steps 6) limit=180 ;;  # memory slopes over steps 2-6: five points, not two
    esac
    # 150 + 180 + 120 s at most: within 8 minutes; a benchmark cut short still reports its finished steps
    timeout "$limit" "$PY" benchmarks/rollout_step.py --arch "$arch" "${args[@]}" --out "$OUT/$arch" \
        >"$OUT/$arch.json" 2>"$OUT/$arch.err"
    echo "$?" >"$OUT/$arch.rc"
done

"$PY" - "$OUT" $ARCHS <<'EOF'
import json, sys, xml.etree.ElementTree as ET
from pathlib import Path
from train.memory_trend import memory_slopes

out, archs = Path(sys.argv[1]), sys.argv[2:]
report = {"check": "gpu_check", "tests": {"exit": int((out / "tests.rc").read_text())}}
try:
    suite = ET.parse(out / "tests.xml").getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    report["tests"].update({k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")})
    report["tests"]["failed"] = [
        c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None or c.find("error") is not None
    ]
except (OSError, ET.ParseError):
    report["tests"]["log_tail"] = (out / "tests.log").read_text(errors="replace")[-2000:]
for arch in archs:
    try:
        report[arch] = json.loads((out / arch / "result.json").read_text())
    except (OSError, ValueError):  # cut short or failed: the steps it logged, and why it stopped
        metrics = out / arch / "run" / "metrics.jsonl"
        report[arch] = {
            "exit": int((out / f"{arch}.rc").read_text()),
            "logged_steps": [json.loads(x) for x in metrics.read_text().splitlines()] if metrics.is_file() else [],
            "stderr_tail": (out / f"{arch}.err").read_text(errors="replace")[-2000:],
        }
        steps = report[arch]["logged_steps"]
        report[arch]["memory_slopes"] = memory_slopes(steps, last=len(steps) - 1 if len(steps) > 2 else None)
    # GiB per step of the host's RSS and of the GPU's allocated and reserved memory, over the steps after the
    # first: about 0 when flat; what each step adds when memory is held (train.memory_trend)
    slopes = report[arch].get("memory_slopes") or {}
    report.setdefault("memory_gib_per_step", {})[arch] = {
        name: slopes[key]["gib_per_step"] if key in slopes else None
        for name, key in (("host_rss", "memory/rss_gib"), ("host_heap_in_use", "memory/heap_in_use_gib"),
                          ("gpu_allocated", "memory/gpu_allocated_gib"), ("gpu_reserved", "memory/gpu_reserved_gib"))
    }
print(json.dumps(report, indent=2))
EOF
