"""Two "machines" on 127.0.0.1: the trainer launched once per machine, as on a cluster, over gloo.

- ``accelerate launch --config_file configs/accelerate/multi_node.yaml --machine_rank R`` twice (one process
  a machine), and the same with ``multi_node_deepspeed_zero2.yaml`` (DeepSpeed's ``standard`` multi-node
  launcher): the trainer runs its two steps across both and writes its checkpoints and metrics once.
- ``torchrun --nnodes 2 --node-rank R`` twice, on the trainer's own step (``tests/support/multi_node_driver.py``):
  after each step the parameters are equal on both machines, bit for bit, and the two processes' shares of the
  loss add up to one process's loss on the same global batch, whose weights they follow.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train.test_distributed import REPO_ROOT, TIMEOUT_S, _check_run, _free_port, launch_env

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")

DRIVER = REPO_ROOT / "tests" / "support" / "multi_node_driver.py"


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
    port = str(_free_port())
    command = [
        sys.executable,
        *("-m", "accelerate.commands.launch", "--config_file", f"configs/accelerate/{config}"),
        *("--machine_rank", "{rank}", "--main_process_ip", "127.0.0.1", "--main_process_port", port),
        *("-m", "train", "configs/train/tiny_test.yaml"),
        f"model.name_or_path={tiny_model_dir}",
        f"logging.output_dir={out}",
    ]
    main, other = _on_two_machines(command)
    assert other.returncode == 0, f"machine 1: exit {other.returncode}\n{other.stderr[-6000:]}"
    _check_run(main, tiny_model_dir, out)
    assert "memory plan per process (2 processes" in main.stdout  # one run of two processes, not two runs
    if "deepspeed" in config:  # DeepSpeed really ran across the machines: one optimiser shard on each
        shards = (out / "checkpoints" / "step_000002" / "pytorch_model").glob(
            "zero_pp_rank_*_optim_states.pt"
        )
        assert len(list(shards)) == 2


@pytest.mark.slow
def test_two_machines_step_as_one_process_on_the_global_batch(tiny_model_dir: Path, tmp_path: Path) -> None:
    alone = subprocess.run(
        [sys.executable, str(DRIVER), str(tiny_model_dir), str(tmp_path / "one")],
        cwd=REPO_ROOT,
        env=launch_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
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
