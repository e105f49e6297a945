"""`kvplan plan --kv-cache-memory` for a local model outside the catalog: a dense decoder's weights are
read from its config.json without torch, and a model whose weights cannot be counted is planned all
the same, its weights unknown (null), with one warning on stderr."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest

from kvplan.semantics.weights import QuantScheme, estimate
from kvplan.sources.models import resolve_config
from tests.uncountable import BLOCK_TORCH, model_dir, warning_lines

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 6, "hidden_size": 256,
         "num_attention_heads": 8, "num_key_value_heads": 4, "intermediate_size": 704, "vocab_size": 5000,
         "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
HEAVY = ("torch", "transformers")


def run_plan(args: list[str], *, block_torch: bool = False) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """`kvplan plan ARGS` in a fresh interpreter: the process, and the heavy modules it imported (printed
    last on stderr). `block_torch` makes torch and transformers unimportable, as where they are not installed."""
    code = (
        "import sys\n"
        + (BLOCK_TORCH if block_torch else "")
        + "from kvplan.cli import run_app\n"
        f"try:\n    run_app(['plan', *{args!r}])\n"
        "except SystemExit as done:\n    code = done.code\n"
        f"print(sorted(m for m in sys.modules if sys.modules[m] and m.startswith({HEAVY!r})), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    *_, imported = done.stderr.strip().splitlines() or [""]
    return done, json.loads(imported.replace("'", '"')) if imported.startswith("[") else []


@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 2)])
def test_a_local_llama_is_planned_with_its_weights_and_without_torch(tmp_path, tp, pp):
    directory = model_dir(tmp_path, LLAMA)
    done, imported = run_plan(["--model", directory, "--kv-cache-memory", "24GiB", "--json",
                               "--tensor-parallel-size", str(tp), "--pipeline-parallel-size", str(pp)])
    assert done.returncode == 0, done.stderr
    assert imported == []
    record = json.loads(done.stdout)
    pytest.importorskip("torch")
    from kvplan.measure.meta_build import build_layout

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = estimate(build_layout(resolve_config(directory)), "bfloat16", tp, pp, QuantScheme("none"), "")
    assert (record["weights_bytes"], record["weights_per_gpu_bytes"]) == (built.total_bytes, built.per_rank_bytes)
    assert [stage["weights_bytes"] for stage in record["pipeline_stages"]] == list(built.per_stage_bytes)
    assert record["weights_exact"] and record["weights_method"].startswith("config.json")
    assert record["warnings"] == [] and "warning" not in done.stderr


def test_weights_unknown_without_torch_still_plans(tmp_path):
    directory = model_dir(tmp_path)
    done, imported = run_plan(["--model", directory, "--kv-cache-memory", "24GiB", "--json"], block_torch=True)
    assert done.returncode == 0, done.stderr
    assert imported == []
    record = json.loads(done.stdout)     # stdout is the JSON and nothing else
    assert record["fits"] and record["num_blocks"] > 0
    assert (record["weights_bytes"], record["weights_per_gpu_bytes"], record["weights_exact"]) == (None, None, None)
    (warning,) = warning_lines(done.stderr)
    assert f"weights unknown for {directory}" in warning and "torch" in warning
    assert "pip install" in warning and "MixtralForCausalLM" in warning
    assert warning.removeprefix("kvplan: warning: ") in record["warnings"]

    console, _ = run_plan(["--model", directory, "--kv-cache-memory", "24GiB"], block_torch=True)
    assert console.returncode == 0, console.stderr
    assert "weights" in console.stdout and "unknown:" in console.stdout
    assert warning_lines(console.stderr) == [warning]
