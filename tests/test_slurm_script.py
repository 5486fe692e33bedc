"""``scripts/slurm_train.sh`` in its dry run (the commands it would start, printed): servers on the last nodes,
the trainer on the others with one machine rank a node, the servers' URLs and the shared weights folder
handed to the run, and the refusals."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "slurm_train.sh"


def _dry_run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "DRY_RUN": "1", **env}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=full, capture_output=True, text=True, timeout=60, check=False
    )


def test_trainer_nodes_and_server_nodes_get_their_commands() -> None:
    done = _dry_run(
        "/shared/model",
        "configs/train/first_responder_gpu_vllm.yaml",
        "max_steps=3",
        NODES="gpu1 gpu2 gpu3 gpu4",
        SERVE_NODES="2",
        GPUS_PER_NODE="8",
        WEIGHTS_DIR="/shared/weights",
    )
    assert done.returncode == 0, done.stderr
    lines = sorted(done.stdout.strip().splitlines())
    serve = [shlex.split(line) for line in lines if " serve " in line]
    assert [cmd[cmd.index("-w") + 1] for cmd in serve] == ["gpu3", "gpu4"]
    assert all(cmd[cmd.index("serve") + 1] == "/shared/model" and "0.0.0.0" in cmd for cmd in serve)
    (train,) = [shlex.split(line) for line in lines if "bash -c" in line]
    assert train[:5] == ["srun", "--nodes=2", "--ntasks-per-node=1", "-w", "gpu1,gpu2"]
    launch = shlex.split(" ".join(train[train.index("-c") + 1 :]))  # what each trainer node's shell runs
    value = {launch[i]: launch[i + 1] for i in range(len(launch) - 1) if launch[i].startswith("--")}
    assert (value["--num_machines"], value["--num_processes"]) == ("2", "16")
    assert (value["--machine_rank"], value["--main_process_ip"]) == ("$SLURM_PROCID", "gpu1")
    assert launch[launch.index("-m") + 1 :] == [
        "train",
        "configs/train/first_responder_gpu_vllm.yaml",
        "model.name_or_path=/shared/model",
        "rollout.backend=vllm",
        "rollout.vllm_urls=[http://gpu3:8000/v1,http://gpu4:8000/v1]",
        "rollout.weights_dir=/shared/weights",
        "max_steps=3",
    ]


def test_servers_need_a_shared_weights_folder_and_the_trainer_a_node() -> None:
    no_folder = _dry_run("m", "c.yaml", NODES="a b", SERVE_NODES="1", WEIGHTS_DIR="")
    assert no_folder.returncode == 2 and "WEIGHTS_DIR" in no_folder.stderr
    no_trainer = _dry_run("m", "c.yaml", NODES="a", SERVE_NODES="1", WEIGHTS_DIR="/w")
    assert no_trainer.returncode == 2 and "none for the trainer" in no_trainer.stderr
    alone = _dry_run("m", "c.yaml", NODES="a b", SERVE_NODES="0")  # the config's own backend samples
    assert alone.returncode == 0 and " serve " not in alone.stdout and "rollout.backend" not in alone.stdout


def test_the_nccl_path_starts_servers_for_it_and_names_the_trainers_first_machine() -> None:
    done = _dry_run("m", "c.yaml", NODES="a b c", SERVE_NODES="1", TRANSFER="nccl", WEIGHTS_DIR="")
    assert done.returncode == 0, done.stderr
    (serve,) = [shlex.split(line) for line in done.stdout.splitlines() if " serve " in line]
    assert serve[-2:] == ["--weight-transfer", "nccl"]
    (train,) = [shlex.split(line) for line in done.stdout.splitlines() if "bash -c" in line]
    launch = shlex.split(" ".join(train[train.index("-c") + 1 :]))
    assert launch[-3:] == [
        "rollout.transfer.path=nccl",
        "rollout.transfer.address=a",
        "rollout.transfer.port=29700",
    ]
    assert not any("rollout.weights_dir" in word for word in launch)
    wrong = _dry_run("m", "c.yaml", NODES="a b", SERVE_NODES="1", TRANSFER="ipc")
    assert wrong.returncode == 2 and "TRANSFER must be shared_filesystem or nccl" in wrong.stderr
