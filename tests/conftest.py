"""Shared fixtures: the golden data copied into the repository (see tests/data/README.md), a tiny
model saved with `save_pretrained` (loaded back through `--model PATH`), and the CLI run in-process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvplan.cli import run_app

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def traces_dir(data_dir: Path) -> Path:
    return data_dir / "traces"


TINY_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 1024, "max_position_embeddings": 4096,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6,
}


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    from kvplan.measure.hf import build_dummy_model, hf_config

    directory = tmp_path_factory.mktemp("tiny-qwen2")
    build_dummy_model(hf_config(TINY_CONFIG), torch.bfloat16, "cpu").save_pretrained(directory)
    assert (directory / "model.safetensors").is_file()
    return directory


@pytest.fixture(scope="session")
def tiny_config_only_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny-config")
    (directory / "config.json").write_text(json.dumps(TINY_CONFIG))
    return directory


@pytest.fixture
def kvplan(capsys: pytest.CaptureFixture[str]):
    """Run `kvplan ARGS` in-process: (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exit_info:
            run_app(list(args))
        captured = capsys.readouterr()
        return exit_info.value.code or 0, captured.out, captured.err

    return run
