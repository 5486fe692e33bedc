"""No code from a hub, ever: every model the project loads has transformers' hub kernels off, and the versions
of torch, transformers and accelerate are checked at start-up.

On CUDA a model loaded with hub kernels on (transformers' default when the ``kernels`` package is installed)
kernelizes on ``model.train()`` and downloads kernels from the hub; on a CPU the same models call the
``kernels`` package's ``kernelize`` at load and on every ``train()``/``eval()``. So on a CPU, a run whose
kernels loader and hub downloads raise shows that no path of ours reaches them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, NoReturn

import pytest

from envs.models.loading import REQUIRED_VERSIONS, VersionError, check_versions
from tests.train.runs import ROOT, SMALL_RUN, run_config

pytest.importorskip("kernels")


def _refuse(name: str) -> Any:
    def refused(*args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError(f"{name} was called: a code path reached the hub or the kernels loader")

    return refused


@pytest.fixture
def no_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernels package's loaders and the hub's downloads raise; ``USE_HUB_KERNELS`` is at transformers'
    default (on), as on a fresh machine."""
    import huggingface_hub
    import kernels
    import transformers.integrations.hub_kernels as hub_kernels

    monkeypatch.setenv("USE_HUB_KERNELS", "YES")  # restored (unset) afterwards, whatever the code sets
    for name in ("kernelize", "get_kernel", "get_local_kernel", "get_locked_kernel", "load_kernel"):
        if hasattr(kernels, name):
            monkeypatch.setattr(kernels, name, _refuse(f"kernels.{name}"))
    for name in dir(hub_kernels):  # transformers' own references to them
        if (
            name.startswith("_kernels_")
            and callable(getattr(hub_kernels, name))
            and name != "_kernels_enabled"
        ):
            monkeypatch.setattr(hub_kernels, name, _refuse(f"transformers hub_kernels.{name}"))
    for name in ("hf_hub_download", "snapshot_download"):
        monkeypatch.setattr(huggingface_hub, name, _refuse(f"huggingface_hub.{name}"))
        for module in (
            "transformers.utils.hub",
            "huggingface_hub.file_download",
            "huggingface_hub._snapshot_download",
        ):
            mod = __import__(module, fromlist=["_"])
            if hasattr(mod, name):
                monkeypatch.setattr(mod, name, _refuse(f"{module}.{name}"))


def test_the_refusal_is_armed(no_hub: None, tiny_model_dir: Path) -> None:
    """The guard itself: transformers as it loads by default does reach the kernels loader (from 5.24, which
    made hub kernels the default; older versions load none unless asked)."""
    import transformers
    from packaging.version import Version
    from transformers import AutoModelForCausalLM

    if Version(transformers.__version__).release < (5, 24):
        pytest.skip(f"transformers {transformers.__version__} loads no hub kernels by default")

    with pytest.raises(AssertionError, match="kernels loader"):
        AutoModelForCausalLM.from_pretrained(tiny_model_dir).train()


@pytest.mark.slow
def test_a_run_reaches_no_hub_code(no_hub: None, tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """Policy, KL reference, bf16 sampling copy, warm start, training steps and both evaluations."""
    from train.trainer import train

    monkeypatch.chdir(ROOT)
    cfg = run_config(
        "first_responder_cpu.yaml",
        tiny_model_dir,
        tmp_path / "run",
        "max_steps=1",
        *SMALL_RUN,
        "rollout.inference_dtype=bfloat16",
        "loss.beta=0.04",
        "warm_start.epochs=1",
        "logging.wandb_mode=disabled",
        "env.scenarios=configs/scenarios/first_responder.yaml",
        "env.eval_scenarios=null",
    )
    result = train(cfg)
    assert result["after"]["rollouts"] == 3
    assert (tmp_path / "run" / "warm_start").is_dir()


def test_the_local_backend_generates_with_no_hub_code(no_hub: None, tiny_model_dir: Path) -> None:
    """``rubric-grpo eval`` and synth's local generator load through ``LocalBackend.from_pretrained``."""
    from envs.backends.base import SamplingParams
    from envs.backends.local import LocalBackend

    backend = LocalBackend.from_pretrained(str(tiny_model_dir))
    assert backend.model.use_kernels is False
    backend.model.train()  # where a CUDA model would kernelize
    backend.model.eval()

    async def sample() -> Any:
        try:
            return await backend.generate([1, 2, 3], SamplingParams(n=2, max_tokens=4))
        finally:
            await backend.close()

    assert len(asyncio.run(sample())) == 2


def test_too_old_a_package_is_refused_with_one_message(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "5.15.0" if name == "transformers" else real(name))
    with pytest.raises(VersionError) as caught:
        check_versions()
    assert str(caught.value).startswith(
        "transformers 5.15.0 is installed; rubric-grpo needs transformers>=5.16.1"
    )
    monkeypatch.setattr(metadata, "version", real)
    check_versions()  # this environment's versions pass


def test_python_m_train_refuses_an_old_transformers_before_loading(monkeypatch, capsys) -> None:
    from importlib import metadata

    import train.__main__ as entry

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "5.15.0" if name == "transformers" else real(name))
    assert entry.main([str(ROOT / "configs/train/tiny_test.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "train: transformers 5.15.0 is installed; rubric-grpo needs transformers>=5.16.1 "
        "(pip install 'transformers>=5.16.1', or run ./install.sh)"
    ]


def test_the_minimum_versions_are_the_ones_pyproject_pins() -> None:
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["train"]
    pins = {d.split(">=")[0].strip(): d.split(">=")[1].split(",")[0].strip() for d in deps if ">=" in d}
    for package, minimum in REQUIRED_VERSIONS.items():
        assert pins.get(package) == minimum, package


def test_rubric_grpo_refuses_an_old_transformers_in_one_line(monkeypatch, capsys, tmp_path: Path) -> None:
    """``rubric-grpo eval`` loads its model through ``LocalBackend.from_pretrained``: a too-old transformers is
    one line and exit 2, not a traceback."""
    from importlib import metadata

    from train.cli import main

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "5.15.0" if name == "transformers" else real(name))
    code = main(
        [
            "eval",
            "--rubric",
            str(ROOT / "configs/rubrics/first_responder.yaml"),
            "--scenarios",
            str(ROOT / "configs/scenarios/first_responder_heldout.yaml"),
            "--model",
            str(tmp_path),
            "--out",
            str(tmp_path / "out"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        code == 2
        and len(err) == 1
        and err[0].startswith("rubric-grpo eval: transformers 5.15.0 is installed")
    )
