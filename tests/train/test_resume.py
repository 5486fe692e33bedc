"""A training run killed with SIGKILL and resumed ends with weights bitwise equal to an uninterrupted run.

Both runs are ``python -m train configs/train/tiny_test.yaml max_steps=3 logging.checkpoint_every=1`` on the
tiny model (deterministic on CPU). The interrupted one is killed as soon as the checkpoint of step 2 is
complete, then started again with the same command: it must pick up at step 2 (model, optimiser,
scheduler, RNG states, data cursor) and produce exactly the uninterrupted run's step 3.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.vllm_fixtures import vllm_in_process_or_skip

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")
pytest.importorskip("transformers")

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300


def _cmd(model_dir: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "train",
        "configs/train/tiny_test.yaml",
        "max_steps=3",
        "logging.checkpoint_every=1",
        f"model.name_or_path={model_dir}",
        f"logging.output_dir={out}",
        *extra,
    ]


def _env() -> dict[str, str]:
    # WANDB_SERVICE: set in this process once any test has used wandb; a child that inherits it logs through
    # pytest's wandb service, which still holds the killed run's id and refuses to resume it ("in use").
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    return {**env, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def _run(model_dir: Path, out: Path, *extra: str) -> None:
    proc = subprocess.run(
        _cmd(model_dir, out, *extra),
        cwd=REPO_ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"


def _run_and_kill_after_step_2(model_dir: Path, out: Path, *extra: str) -> None:
    marker = out / "checkpoints" / "step_000002" / "trainer_state.json"
    log = out.parent / f"{out.name}.killed.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(_cmd(model_dir, out, *extra), cwd=REPO_ROOT, env=_env(), stdout=fh, stderr=fh)
        deadline = time.monotonic() + TIMEOUT_S
        try:
            while not marker.exists():
                if proc.poll() is not None:
                    pytest.fail(
                        f"the run ended (exit {proc.returncode}) before step 2's checkpoint\n{log.read_text()}"
                    )
                if time.monotonic() > deadline:
                    pytest.fail("no checkpoint of step 2 in time")
                time.sleep(0.02)
            proc.send_signal(signal.SIGKILL)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, f"the run was not killed mid-way (exit {proc.returncode})"
    assert not (out / "checkpoints" / "step_000003" / "trainer_state.json").exists()


def _final_weights(out: Path) -> dict[str, bytes]:
    """Raw bytes of every tensor of the final checkpoint's exported model."""
    from safetensors.torch import load_file

    tensors = load_file(str(out / "checkpoints" / "step_000003" / "model" / "model.safetensors"))
    return {name: t.contiguous().view(torch.uint8).numpy().tobytes() for name, t in tensors.items()}


def _train_rows(out: Path) -> dict[int, dict[str, float]]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {int(r["step"]): r for r in rows if "train/loss" in r}


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend",
    ["local", pytest.param("vllm_colocate", marks=pytest.mark.vllm)],
)
def test_sigkill_and_resume_is_bitwise_equal_to_an_uninterrupted_run(
    tiny_model_dir: Path, tmp_path: Path, backend: str
) -> None:
    if backend == "vllm_colocate":  # the engine is new after the kill: each request's seed makes it agree
        vllm_in_process_or_skip()
    extra = (f"rollout.backend={backend}",)
    a, b = tmp_path / "a", tmp_path / "b"
    _run(tiny_model_dir, a, *extra)

    _run_and_kill_after_step_2(tiny_model_dir, b, *extra)
    _run(tiny_model_dir, b, *extra)

    state_b = json.loads((b / "checkpoints" / "step_000003" / "trainer_state.json").read_text())
    state_a = json.loads((a / "checkpoints" / "step_000003" / "trainer_state.json").read_text())
    assert state_b["step"] == state_a["step"] == 3
    # the data cursor of a checkpoint counts the examples of every step it holds (2 prompts per step)
    assert state_a["extra"]["cursor"] == state_b["extra"]["cursor"] == {"epoch": 0, "position": 6}
    killed_2 = json.loads((b / "checkpoints" / "step_000002" / "trainer_state.json").read_text())
    assert killed_2["extra"]["cursor"] == {"epoch": 0, "position": 4}

    # the resumed step 3 saw the same rollouts and computed the same loss
    rows_a, rows_b = _train_rows(a), _train_rows(b)
    assert rows_b[3]["reward/mean"] == rows_a[3]["reward/mean"]
    assert rows_b[3]["train/loss"] == rows_a[3]["train/loss"]

    # the resumed run reports the evaluation before training that its killed first process kept in the folder
    report_a, report_b = (a / "report.md").read_text(), (b / "report.md").read_text()
    assert report_b.replace("# Run report: b\n", "# Run report: a\n", 1) == report_a

    weights_a, weights_b = _final_weights(a), _final_weights(b)
    assert weights_a.keys() == weights_b.keys()
    differing = sorted(name for name in weights_a if weights_a[name] != weights_b[name])
    assert not differing, f"tensors not bitwise equal after the resume: {differing}"
