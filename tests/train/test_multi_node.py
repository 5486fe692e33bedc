"""Two "machines" on 127.0.0.1: the trainer launched once per machine, as on a cluster, over gloo.

- ``accelerate launch --config_file configs/accelerate/multi_node.yaml --machine_rank R`` twice (one process
  a machine), and the same with ``multi_node_deepspeed_zero2.yaml`` (DeepSpeed's ``standard`` multi-node
  launcher): the trainer runs its two steps across both and writes its checkpoints and metrics once.
- A run resumes on another number of machines: two machines (DDP) for two steps, then one process, then two
  machines again, each going on from the last checkpoint with the same examples per step and the data walk
  where it stood; a launch that would change the examples per step is refused with the fix, and so is a
  DeepSpeed ZeRO checkpoint on another number of processes.
- ``torchrun --nnodes 2 --node-rank R`` twice, on the trainer's own step (``tests/support/multi_node_driver.py``):
  after each step the parameters are equal on both machines, bit for bit, and the two processes' shares of the
  loss add up to one process's loss on the same global batch, whose weights they follow.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.train.runs import metrics
from tests.train.test_distributed import REPO_ROOT, TIMEOUT_S, _check_run, _free_port, launch_env
from train.checkpoint import latest_checkpoint
from train.run_folder import RunFolder

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")

DRIVER = REPO_ROOT / "tests" / "support" / "multi_node_driver.py"


def _accelerate(config: str, *args: str) -> list[str]:
    """``accelerate launch`` of the trainer on ``tiny_test.yaml`` with accelerate config ``config``."""
    return [
        sys.executable,
        *("-m", "accelerate.commands.launch", "--config_file", f"configs/accelerate/{config}", *args),
        *("-m", "train", "configs/train/tiny_test.yaml"),
    ]


def _two_machines(config: str) -> list[str]:
    """The launch of machine ``{rank}`` of two on 127.0.0.1 (``_on_two_machines`` fills the rank in)."""
    at = (
        "--machine_rank",
        "{rank}",
        "--main_process_ip",
        "127.0.0.1",
        "--main_process_port",
        str(_free_port()),
    )
    return _accelerate(config, *at)


def _run_in(model_dir: Path, out: Path, max_steps: int = 2, prompts_per_step: int = 2) -> list[str]:
    """The trainer's overrides: the tiny model, run folder ``out``, ``max_steps``, ``prompts_per_step``."""
    return [
        f"model.name_or_path={model_dir}",
        f"logging.output_dir={out}",
        f"max_steps={max_steps}",
        f"rollout.prompts_per_step={prompts_per_step}",
    ]


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=launch_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def _on_two_machines(command: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """``command`` started once per machine rank (``{rank}`` filled in), both at once, both waited for."""
    procs = [
        subprocess.Popen(
            [part.format(rank=rank) for part in command],
            cwd=REPO_ROOT,
            env=launch_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=TIMEOUT_S)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


@pytest.mark.slow
@pytest.mark.parametrize("config", ["multi_node.yaml", "multi_node_deepspeed_zero2.yaml"])
def test_the_trainer_runs_on_two_machines(tiny_model_dir: Path, tmp_path: Path, config: str) -> None:
    if "deepspeed" in config:
        pytest.importorskip("deepspeed")
    out = tmp_path / "run"  # one folder both machines see, as a cluster's shared file system
    main, other = _on_two_machines([*_two_machines(config), *_run_in(tiny_model_dir, out)])
    assert other.returncode == 0, f"machine 1: exit {other.returncode}\n{other.stderr[-6000:]}"
    _check_run(main, tiny_model_dir, out)
    assert "memory plan per process (2 processes" in main.stdout  # one run of two processes, not two runs
    if "deepspeed" in config:  # DeepSpeed really ran across the machines: one optimiser shard on each
        shards = (out / "checkpoints" / "step_000002" / "pytorch_model").glob(
            "zero_pp_rank_*_optim_states.pt"
        )
        assert len(list(shards)) == 2
        # its optimiser state is cut in two: one process cannot go on from it, and is told so at once
        port = ("--main_process_port", str(_free_port()))
        alone = _accelerate("deepspeed_zero2.yaml", "--num_processes", "1", *port)
        refused = _run([*alone, *_run_in(tiny_model_dir, out, 3, 4)])
        assert refused.returncode != 0, refused.stderr[-6000:]  # the trainer's 2, as accelerate says it: 1
        assert (
            f"train: {out / 'checkpoints' / 'step_000002'}: a DeepSpeed ZeRO checkpoint of 2 processes "
            "(one optimiser shard each), and this run has 1" in refused.stderr
        )
        assert latest_checkpoint(RunFolder(out)) == out / "checkpoints" / "step_000002"


def _state(out: Path, step: int) -> dict[str, Any]:
    """``trainer_state.json`` of the checkpoint of ``step``."""
    return json.loads((out / "checkpoints" / f"step_{step:06d}" / "trainer_state.json").read_text())


def _steps_logged(out: Path) -> list[int]:
    return [int(row["step"]) for row in metrics(out) if "train/loss" in row]


@pytest.mark.slow
def test_a_run_resumes_from_two_machines_on_one_process_and_back(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    for proc in _on_two_machines([*_two_machines("multi_node.yaml"), *_run_in(tiny_model_dir, out)]):
        assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-6000:]}"
    # 9 training examples (12 toy prompts, a quarter held out), 2 machines x 2 a step: 8 taken in 2 steps
    assert _state(out, 2)["extra"] | {"wandb_run_id": None} == {
        "cursor": {"epoch": 0, "position": 8},
        "wandb_run_id": None,
        "processes": 2,
        "examples_per_step": 4,
    }
    alone = [sys.executable, "-m", "train", "configs/train/tiny_test.yaml"]
    # one process taking 2 a step would halve the steps: refused before any model loads, with the fix
    refused = _run([*alone, *_run_in(tiny_model_dir, out, 3, 2)])
    assert refused.returncode == 2, refused.stderr[-6000:]
    assert "set rollout.prompts_per_step=4 to keep 4" in refused.stderr
    assert _steps_logged(out) == [1, 2]

    resumed = _run([*alone, *_run_in(tiny_model_dir, out, 3, 4)])  # the same 4 a step, on one process
    assert resumed.returncode == 0, resumed.stderr[-6000:]
    assert "memory plan per process (1 process" in resumed.stdout
    assert _steps_logged(out) == [1, 2, 3]  # went on at step 3, not at step 1 again
    # the walk went on where the machines left it: 4 more, the last of epoch 0 and 3 of epoch 1's shuffle
    assert _state(out, 3)["extra"]["cursor"] == {"epoch": 1, "position": 3}
    assert _state(out, 3)["extra"]["processes"] == 1

    main, other = _on_two_machines([*_two_machines("multi_node.yaml"), *_run_in(tiny_model_dir, out, 4, 2)])
    assert main.returncode == other.returncode == 0, f"{main.stderr[-4000:]}\n{other.stderr[-4000:]}"
    assert _steps_logged(out) == [1, 2, 3, 4]
    assert _state(out, 4)["extra"]["cursor"] == {"epoch": 1, "position": 7}
    assert _state(out, 4)["extra"]["processes"] == 2
    # machine 1's process has no RNG state in a checkpoint of one process: it says it goes on from its seed
    assert (
        "process 1: " in other.stdout and "none of this one; it goes on from its seeded RNG" in other.stdout
    )
    assert "none of this one" not in main.stdout


@pytest.mark.slow
def test_two_machines_step_as_one_process_on_the_global_batch(tiny_model_dir: Path, tmp_path: Path) -> None:
    alone = _run([sys.executable, str(DRIVER), str(tiny_model_dir), str(tmp_path / "one")])
    assert alone.returncode == 0, alone.stderr[-6000:]
    port = str(_free_port())
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", "{rank}"]
    torchrun += ["--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", port]
    for proc in _on_two_machines([*torchrun, str(DRIVER), str(tiny_model_dir), str(tmp_path / "two")]):
        assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-6000:]}"

    def read(folder: str, rank: int) -> dict[str, list[dict[str, object]]]:
        return json.loads((tmp_path / folder / f"rank{rank}.json").read_text())

    one, first, second = read("one", 0), read("two", 0), read("two", 1)
    assert (one["world"], first["world"], second["world"]) == (1, 2, 2)
    for step in range(2):
        a, b, reference = first["steps"][step], second["steps"][step], one["steps"][step]
        assert a["parameters"] == b["parameters"], f"step {step + 1}: the machines' weights differ"
        # each process's loss is its share of the step's (normalised over every process's tokens)
        assert float(a["loss"]) + float(b["loss"]) == pytest.approx(
            float(reference["loss"]), rel=1e-4, abs=1e-7
        )
    reference_weights = torch.load(tmp_path / "one" / "rank0.pt")
    weights = torch.load(tmp_path / "two" / "rank0.pt")
    from safetensors.torch import load_file

    initial = load_file(str(tiny_model_dir / "model.safetensors"))
    moved = max((reference_weights[k] - initial[k]).abs().max().item() for k in initial)
    apart = max((reference_weights[k] - weights[k]).abs().max().item() for k in reference_weights)
    assert moved > 1e-3 and apart < moved / 50, (moved, apart)  # measured: moved 0.02, apart 6e-5
