"""Reading run config files: dotted overrides, a file's base, and errors that name the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from train.config_files import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]


def test_dotted_overrides() -> None:
    cfg = load_config(
        ROOT / "configs/train/first_responder_cpu.yaml",
        ["loss.beta=0.04", "rollout.vllm_urls=[a]", "max_steps=3"],
    )
    assert cfg.loss.beta == 0.04 and cfg.rollout.vllm_urls == ["a"] and cfg.max_steps == 3


def test_a_config_starts_from_its_base(tmp_path: Path) -> None:
    """``base:`` reads the other file first; the file's own keys replace its base's section by section, and
    overrides come last. The longer main job and the GPU config are the main job's config plus a few keys."""
    (tmp_path / "parent.yaml").write_text(
        "max_steps: 4\noptim: {learning_rate: 3.0e-5, micro_batch_size: 2}\nlogging: {output_dir: a}\n"
    )
    (tmp_path / "child.yaml").write_text("base: parent.yaml\noptim: {micro_batch_size: 8}\n")
    cfg = load_config(tmp_path / "child.yaml", ["logging.output_dir=b"])
    assert (cfg.max_steps, cfg.optim.learning_rate, cfg.optim.micro_batch_size) == (4, 3e-5, 8)
    assert cfg.logging.output_dir == "b"
    main = load_config(ROOT / "configs/train/first_responder_cpu.yaml")
    long = load_config(ROOT / "configs/train/first_responder_cpu_long.yaml")
    assert long.max_steps > main.max_steps and long.logging.eval_every > 0
    assert long.env == main.env and long.warm_start == main.warm_start and long.optim == main.optim


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("base: missing.yaml\n", r"child.yaml: base: no such file .*missing.yaml"),
        ("base: [a]\n", r"child.yaml: base: expected the path of another run config, got \['a'\]"),
        ("base: child.yaml\n", r"child.yaml: base: child.yaml is a circle"),
        ("base: loop.yaml\n", r"loop.yaml: base: child.yaml is a circle"),
    ],
)
def test_a_bad_base_names_the_file_and_the_field(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "loop.yaml").write_text("base: child.yaml\n")
    (tmp_path / "child.yaml").write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path / "child.yaml")
