"""Checkpoints: an exact resume (weights bitwise equal, RNG streams continued), atomicity under SIGKILL,
pruning, and the plain ``model/`` export of the final checkpoint."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")

import numpy as np  # noqa: E402
from accelerate import Accelerator  # noqa: E402

from train.checkpoint import (  # noqa: E402
    TrainerState,
    check_resumable,
    latest_checkpoint,
    load_latest,
    read_trainer_state,
    save_checkpoint,
)
from train.run_folder import RunFolder  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]


def _build(seed: int) -> tuple[Any, Any, Any, Any]:
    """A tiny model (with dropout, so training consumes torch's RNG), AdamW and a LambdaLR schedule."""
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 16), torch.nn.Dropout(0.2), torch.nn.Tanh(), torch.nn.Linear(16, 1)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1.0 + s))
    accelerator = Accelerator(cpu=True)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    return accelerator, model, optimizer, scheduler


def _train(accelerator: Any, model: Any, optimizer: Any, scheduler: Any, steps: int) -> None:
    """Steps whose data come from the torch, python and numpy global RNGs: a wrong RNG restore shows."""
    model.train()
    for _ in range(steps):
        x_B4 = torch.randn(8, 4)
        scale = 1.0 + random.random() + float(np.random.rand())
        loss = model(x_B4).pow(2).mean() * scale
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def _weights(model: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _assert_bitwise_equal(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def _json_rng_state(rng: random.Random) -> list[Any]:
    """A ``random.Random`` state as plain lists, as the orchestrator stores it in ``extra``."""
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def test_resume_continues_exactly(tmp_path: Path) -> None:
    # Run A: 3 steps, checkpoint, then RNG draws and 3 more steps.
    acc, model, opt, sched = _build(0)
    _train(acc, model, opt, sched, 3)
    data_rng = random.Random(7)
    data_rng.random()
    cursor = {"position": 6, "epoch": 0, "rng": _json_rng_state(data_rng)}
    path = save_checkpoint(acc, RunFolder(tmp_path), TrainerState(3, cursor, "abc123", examples_per_step=2))
    assert path == tmp_path / "checkpoints" / "step_000003"
    draws_a = (torch.rand(5), random.random(), float(np.random.rand()), data_rng.random())
    _train(acc, model, opt, sched, 3)
    weights_a, lr_a, opt_a = _weights(model), sched.get_last_lr(), opt.state_dict()

    # Run B: fresh objects from another seed, resumed from the checkpoint.
    acc_b, model_b, opt_b, sched_b = _build(123)
    state = load_latest(acc_b, RunFolder(tmp_path))
    assert state is not None
    # the process count is the accelerator's (one process here), whatever the caller gave
    expected = TrainerState(3, json.loads(json.dumps(cursor)), "abc123", processes=1, examples_per_step=2)
    assert state == expected and state.path == path
    assert state.cursor is not None
    rng_b = random.Random()
    version, internal, gauss = state.cursor["rng"]
    rng_b.setstate((version, tuple(internal), gauss))
    draws_b = (torch.rand(5), random.random(), float(np.random.rand()), rng_b.random())
    assert torch.equal(draws_a[0], draws_b[0])
    assert draws_a[1:] == draws_b[1:]
    _train(acc_b, model_b, opt_b, sched_b, 3)

    _assert_bitwise_equal(weights_a, _weights(model_b))
    assert sched_b.get_last_lr() == lr_a
    for param_a, param_b in zip(opt_a["state"].values(), opt_b.state_dict()["state"].values(), strict=True):
        _assert_bitwise_equal(param_a, param_b)


def test_no_checkpoint_returns_none(tmp_path: Path) -> None:
    acc, *_ = _build(0)
    assert load_latest(acc, RunFolder(tmp_path)) is None
    assert latest_checkpoint(RunFolder(tmp_path / "missing")) is None


def test_keep_last_prunes_old_checkpoints(tmp_path: Path) -> None:
    acc, *_ = _build(0)
    for step in (1, 2, 3, 4):
        save_checkpoint(acc, RunFolder(tmp_path), TrainerState(step, {"position": step}))
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_000003", "step_000004"]
    assert (root / "latest").read_text().strip() == "step_000004"
    save_checkpoint(acc, RunFolder(tmp_path), TrainerState(5), keep_last=1)
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_000005"]


def test_leftover_tmp_and_bad_pointer_are_ignored(tmp_path: Path) -> None:
    acc, *_ = _build(0)
    save_checkpoint(acc, RunFolder(tmp_path), TrainerState(2, {"position": 2}))
    root = tmp_path / "checkpoints"
    # A save killed before its rename: even with a trainer_state.json inside, a .tmp folder never counts.
    debris = root / "step_000009.tmp"
    debris.mkdir()
    (debris / "trainer_state.json").write_text('{"step": 9, "extra": {}}')
    assert latest_checkpoint(RunFolder(tmp_path)) == root / "step_000002"
    state = load_latest(acc, RunFolder(tmp_path))
    assert state is not None and state.step == 2

    # A pointer to a folder that is gone: fall back to the newest complete checkpoint.
    (root / "latest").write_text("step_000007\n")
    assert latest_checkpoint(RunFolder(tmp_path)) == root / "step_000002"

    # The next save clears the debris.
    save_checkpoint(acc, RunFolder(tmp_path), TrainerState(3))
    assert not debris.exists()
    assert latest_checkpoint(RunFolder(tmp_path)) == root / "step_000003"


def test_saving_the_same_step_again_replaces_it(tmp_path: Path) -> None:
    acc, *_ = _build(0)
    save_checkpoint(acc, RunFolder(tmp_path), TrainerState(4, {"position": 1}))
    save_checkpoint(acc, RunFolder(tmp_path), TrainerState(4, {"position": 2}))
    state = load_latest(acc, RunFolder(tmp_path))
    assert state is not None and state.cursor == {"position": 2}
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step_000004"]


def test_a_cursor_that_is_not_json_fails_before_writing(tmp_path: Path) -> None:
    acc, *_ = _build(0)
    with pytest.raises(ValueError):
        save_checkpoint(acc, RunFolder(tmp_path), TrainerState(1, {"loss": float("nan")}))
    with pytest.raises(TypeError):
        save_checkpoint(acc, RunFolder(tmp_path), TrainerState(1, {"tensor": torch.zeros(1)}))
    assert not (tmp_path / "checkpoints").exists()


def _child_main(mode: str, run_dir: str, out: str) -> None:
    """Run in a subprocess. ``kill``: train 3 steps, checkpoint, train 3 more, and die by SIGKILL in the
    middle of the second checkpoint. ``resume``: from fresh objects, resume and train 3 more steps."""
    if mode == "kill":
        acc, model, opt, sched = _build(0)
        _train(acc, model, opt, sched, 3)
        save_checkpoint(acc, RunFolder(Path(run_dir)), TrainerState(3, {"position": 3}))
        _train(acc, model, opt, sched, 3)
        save_state = acc.save_state

        def save_state_then_die(output_dir: str) -> Any:
            save_state(output_dir)  # accelerate's files are written; the rename and pointer are not
            os.kill(os.getpid(), signal.SIGKILL)

        acc.save_state = save_state_then_die
        save_checkpoint(acc, RunFolder(Path(run_dir)), TrainerState(6, {"position": 6}))
        raise AssertionError("unreachable: SIGKILL above")
    acc, model, opt, sched = _build(123)
    state = load_latest(acc, RunFolder(Path(run_dir)))
    assert state is not None and state.step == 3, state
    _train(acc, model, opt, sched, 3)
    torch.save(_weights(model), out)


def _run_child(mode: str, run_dir: Path, out: Path) -> subprocess.CompletedProcess[str]:
    code = f"from tests.train.test_checkpoint import _child_main; _child_main({mode!r}, {str(run_dir)!r}, {str(out)!r})"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )


def test_sigkill_mid_save_then_resume_in_a_new_process(tmp_path: Path) -> None:
    run_dir, out = tmp_path / "run", tmp_path / "weights.pt"
    killed = _run_child("kill", run_dir, out)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    root = run_dir / "checkpoints"
    assert (root / "step_000006.tmp").is_dir()  # the interrupted save
    assert (root / "latest").read_text().strip() == "step_000003"

    resumed = _run_child("resume", run_dir, out)
    assert resumed.returncode == 0, resumed.stderr

    # The uninterrupted run: 6 steps straight.
    acc, model, opt, sched = _build(0)
    _train(acc, model, opt, sched, 6)
    _assert_bitwise_equal(_weights(model), torch.load(out))


def test_final_checkpoint_holds_a_plain_model(tmp_path: Path, tiny_model_dir: Path) -> None:
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_model_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    acc = Accelerator(cpu=True)
    model, optimizer = acc.prepare(model, optimizer)
    ids_BT = torch.tensor([[1, 2, 3, 4]])
    acc.backward(model(input_ids=ids_BT, labels=ids_BT).loss)
    optimizer.step()

    path = save_checkpoint(acc, RunFolder(tmp_path), TrainerState(1), model=model, tokenizer=tokenizer)
    plain = path / "model"
    assert (plain / "config.json").is_file() and (plain / "model.safetensors").is_file()
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(plain)
    _assert_bitwise_equal(_weights(acc.unwrap_model(model)), _weights(reloaded))
    assert transformers.AutoTokenizer.from_pretrained(plain).encode("hello") == tokenizer.encode("hello")


def _saved_by(tmp_path: Path, processes: int | None, examples: int | None, shards: int = 0) -> RunFolder:
    """A run folder whose checkpoint says it was saved by ``processes`` taking ``examples`` a step (None: a
    checkpoint from before these were kept), with ``shards`` DeepSpeed optimiser shards as ZeRO lays them out."""
    run = RunFolder(tmp_path / "run")
    acc, _, _, _ = _build(0)
    path = save_checkpoint(acc, run, TrainerState(2, {"epoch": 0, "position": 4}))
    state_file = path / "trainer_state.json"
    saved = json.loads(state_file.read_text())
    saved["extra"].update(processes=processes, examples_per_step=examples)
    state_file.write_text(json.dumps(saved))
    for rank in range(shards):
        (path / "pytorch_model").mkdir(exist_ok=True)
        (path / "pytorch_model" / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_bytes(b"")
    return run


def test_a_checkpoint_resumes_where_its_examples_per_step_share_out_evenly(tmp_path: Path) -> None:
    run = _saved_by(tmp_path, processes=2, examples=4)
    for processes, per_process in [(1, 4), (2, 2), (4, 1)]:  # DDP: any count that keeps 4 a step
        check_resumable(run, processes, per_process, deepspeed=False)
    with pytest.raises(ValueError) as kept:  # 1 process x 2 would halve the steps
        check_resumable(run, 1, 2, deepspeed=False)
    message = str(kept.value)
    assert message.startswith(f"{run.checkpoints / 'step_000002'}: the checkpoint's steps took 4 ")
    assert "set rollout.prompts_per_step=4 to keep 4" in message
    with pytest.raises(ValueError, match=r"4 examples do not share evenly between 3 processes: resume on "):
        check_resumable(run, 3, 1, deepspeed=False)
    assert read_trainer_state(latest_checkpoint(run) or Path()).processes == 2


def test_a_deepspeed_checkpoint_resumes_only_on_its_own_number_of_processes(tmp_path: Path) -> None:
    run = _saved_by(tmp_path, processes=2, examples=4, shards=2)
    check_resumable(run, 2, 2, deepspeed=True)
    with pytest.raises(ValueError) as refused:
        check_resumable(run, 1, 4, deepspeed=True)
    message = str(refused.value)
    assert message.startswith(
        f"{run.checkpoints / 'step_000002'}: a DeepSpeed ZeRO checkpoint of 2 processes"
    )
    assert "this run has 1" in message and "Resume on 2 processes" in message
    # a checkpoint from before the process count was kept: its shards count the processes
    old = _saved_by(tmp_path / "old", processes=None, examples=None, shards=3)
    check_resumable(old, 3, 5, deepspeed=True)  # nothing to say about the examples: unknown
    with pytest.raises(ValueError, match="a DeepSpeed ZeRO checkpoint of 3 processes"):
        check_resumable(old, 2, 5, deepspeed=True)
    check_resumable(old, 2, 5, deepspeed=False)  # unknown without DeepSpeed: nothing refused


def test_a_process_the_checkpoint_holds_no_rng_state_of_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _saved_by(tmp_path, processes=2, examples=4)
    path = latest_checkpoint(run)
    assert path is not None
    acc, _, _, _ = _build(1)
    load_latest(acc, run)
    assert capsys.readouterr().out == ""  # its own RNG file is there
    (path / "random_states_0.pkl").unlink()  # as for process 2 of a checkpoint of 2
    before = torch.get_rng_state()
    state = load_latest(acc, run)
    assert state is not None and state.step == 2 and state.processes == 2
    assert torch.equal(torch.get_rng_state(), before)  # its seeded RNG, untouched
    assert capsys.readouterr().out == (
        f"process 0: {path} holds the RNG states of 2 processes, none of this one; it goes on from its "
        "seeded RNG\n"
    )
