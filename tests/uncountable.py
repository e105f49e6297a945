"""A model whose weights kvplan cannot count, for the commands that plan it: a local Mixtral config
(outside the catalog, its parameters not readable from config.json alone), so that counting them
takes a meta-device build, which fails where torch is missing (`block_torch`) or where the build
itself fails (`break_weight_count`). Its KV cache is sized all the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

MIXTRAL = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_hidden_layers": 2,
           "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
           "vocab_size": 1000, "num_local_experts": 4, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
# the first lines of a fresh interpreter in which torch and transformers cannot be imported
BLOCK_TORCH = "import sys\nsys.modules['torch'] = sys.modules['transformers'] = None\n"
WARNING = "kvplan: warning: "


def model_dir(directory: Path, config: dict | None = None) -> str:
    """`config` (the Mixtral by default) as a local model directory."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(MIXTRAL if config is None else config))
    return str(directory)


def break_weight_count(monkeypatch: pytest.MonkeyPatch, why: str = "transformers cannot build "
                       "MixtralForCausalLM to count its weights: RuntimeError: no") -> str:
    """Make the meta-device build fail with `why`, as kvplan reports a failing build."""
    from kvplan.errors import KvplanError

    def failing_build(resolved: object, trust_remote_code: bool) -> None:
        raise KvplanError(why)

    monkeypatch.setattr("kvplan.measure.meta_build.build_layout", failing_build)
    return why


def warning_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(WARNING)]
