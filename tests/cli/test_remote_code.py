"""Issue 12's first finding: no file kvplan reads can turn on remote code. A model directory whose
config.json names an unknown architecture with an `auto_map` to a configuration file that writes a
marker; a saved profile edited to point at it with `trust_remote_code: true` (and no
largest_max_model_len, so that check re-plans); a spec, a workload, a target that name it. The
marker is written only when --trust-remote-code is on the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAVED_PROFILE = REPO / "examples" / "checks" / "profiles" / "qwen2-0.5b-l4.json"

pytest.importorskip("transformers")  # the remote code path is transformers' AutoConfig

CONFIGURATION = '''
from pathlib import Path
from transformers import PretrainedConfig

Path({marker!r}).write_text("remote code ran")


class EvilConfig(PretrainedConfig):
    model_type = "evil"

    def __init__(self, **kwargs):
        self.num_hidden_layers = kwargs.pop("num_hidden_layers", 2)
        self.hidden_size = kwargs.pop("hidden_size", 64)
        self.num_attention_heads = kwargs.pop("num_attention_heads", 4)
        self.num_key_value_heads = kwargs.pop("num_key_value_heads", 2)
        self.vocab_size = kwargs.pop("vocab_size", 1000)
        self.max_position_embeddings = kwargs.pop("max_position_embeddings", 2048)
        super().__init__(**kwargs)
'''


@pytest.fixture
def evil_model(tmp_path: Path) -> Path:
    model = tmp_path / "evil-model"
    model.mkdir()
    # transformers imports a copy of this file from its modules cache: the marker's path is absolute
    (model / "configuration_evil.py").write_text(CONFIGURATION.replace("{marker!r}", repr(str(model / "MARKER"))))
    (model / "config.json").write_text(json.dumps({
        "architectures": ["EvilForCausalLM"], "model_type": "evil",
        "auto_map": {"AutoConfig": "configuration_evil.EvilConfig"},
        "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 1000, "max_position_embeddings": 2048, "torch_dtype": "bfloat16",
    }))
    return model


def kvplan(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvplan", *args], capture_output=True, text=True, cwd=cwd,
                          env={"HF_HUB_OFFLINE": "1", "PATH": "", "HF_HOME": str(cwd / "hf")})


def edited_profile(evil_model: Path, directory: Path) -> Path:
    """The example profile, pointed at the model and saying it was made with trust_remote_code."""
    profile = json.loads(SAVED_PROFILE.read_text())
    profile["provenance"]["model"] = str(evil_model)
    profile["provenance"]["config_sha256"] = None
    profile["provenance"]["knobs"]["model"] = str(evil_model)
    profile["provenance"]["knobs"]["trust_remote_code"] = True
    profile["largest_max_model_len"] = None
    path = directory / "profile.json"
    path.write_text(json.dumps(profile))
    return path


def test_a_saved_profile_cannot_turn_on_remote_code(evil_model: Path, tmp_path: Path) -> None:
    edited_profile(evil_model, tmp_path)
    spec = tmp_path / "spec.toml"
    # the example profile was saved under 0.17.1
    spec.write_text('vllm_version = "0.17.1"\n[target]\nprofile = "profile.json"\n\n[[assert]]\n'
                    'max_model_len_fits = 1024\n')
    marker = evil_model / "MARKER"
    done = kvplan("check", str(spec), cwd=tmp_path)
    assert not marker.exists(), done.stderr
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--trust-remote-code" in done.stderr
    # the same check with the flag runs the model's code: the marker would tell
    kvplan("check", str(spec), "--trust-remote-code", cwd=tmp_path)
    assert marker.exists()


def test_a_spec_cannot_turn_on_remote_code(evil_model: Path, tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[target]\nmodel = "{evil_model}"\nkv_cache_memory = "1GiB"\ntrust_remote_code = true\n\n'
                    "[[assert]]\nfits = true\n")
    done = kvplan("check", str(spec), cwd=tmp_path)
    assert done.returncode == 2 and not (evil_model / "MARKER").exists()
    assert done.stderr.strip() == ("kvplan: error: spec.toml: target.trust_remote_code: trust_remote_code is never "
                                   "read from a file (a spec, profile or workload cannot enable code execution): "
                                   "pass --trust-remote-code on the command line")


def test_a_workload_cannot_turn_on_remote_code(evil_model: Path, tmp_path: Path) -> None:
    workload = tmp_path / "workload.json"
    workload.write_text(json.dumps({
        "schema_version": 1, "engine": {"model": str(evil_model), "kv_cache_memory": "1GiB",
                                        "trust_remote_code": True},
        "timing": {"step_time_ms": 10}, "classes": [{"prompt_tokens": 8, "output_tokens": 2}],
        "arrival": {"process": "all_at_once", "count": 2}}))
    done = kvplan("simulate", str(workload), cwd=tmp_path)
    assert done.returncode == 2
    assert "engine.trust_remote_code: trust_remote_code is never read from a file" in done.stderr
    assert not (evil_model / "MARKER").exists()


@pytest.mark.parametrize("command", [
    ("plan", "--kv-cache-memory", "1GiB"),
    ("profile", "--backend", "fake", "--gpu", "l4-24gb", "--no-allocate"),
])
def test_plan_and_profile_read_the_config_as_data_without_the_flag(evil_model: Path, tmp_path: Path,
                                                                    command: tuple[str, ...]) -> None:
    done = kvplan(*command, "--model", str(evil_model), cwd=tmp_path)
    assert done.returncode == 2 and "--trust-remote-code" in done.stderr and "Traceback" not in done.stderr
    assert not (evil_model / "MARKER").exists()
