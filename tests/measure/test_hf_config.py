"""Models kvplan does not read itself go through transformers' AutoConfig; catalog models never do."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kvplan.errors import KvplanError
from kvplan.measure.hf_config import model_shape as shape_from_config


def test_unknown_architecture_goes_through_autoconfig():
    pytest.importorskip("transformers")
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 3, "n_head": 4, "n_embd": 64,
              "n_positions": 256, "vocab_size": 1000, "torch_dtype": "float16"}
    shape = shape_from_config(config, "tiny-gpt2")
    # GPT-2's attribute map: n_layer -> num_hidden_layers, n_head -> num_attention_heads, n_embd -> hidden_size
    assert (shape.num_hidden_layers, shape.num_kv_heads, shape.head_size, shape.max_model_len) == (3, 4, 16, 256)
    assert {layer.kind for layer in shape.layers} == {"full"}
    assert shape.config_dtype == "float16"
    assert "AutoConfig" in shape.warnings[0]


def test_architecture_unknown_everywhere_is_bad_input():
    pytest.importorskip("transformers")
    config = {"architectures": ["NoSuchForCausalLM"], "model_type": "no_such_model", "num_hidden_layers": 2}
    with pytest.raises(KvplanError, match="--trust-remote-code"):
        shape_from_config(config, "nope")


def test_a_config_class_refusing_the_config_is_bad_input(monkeypatch):
    """transformers 5 validates configs with huggingface_hub's strict dataclasses, whose errors are no
    ValueError (issue 12: a layer_types longer than the layers was a traceback)."""
    transformers = pytest.importorskip("transformers")
    from kvplan.measure.hf_config import hf_config_from

    class Refused(Exception):
        pass

    def refuse(cls, fields, **kwargs):
        raise Refused("`num_hidden_layers` (2) must be equal to the number of `layer_types` (7)")

    monkeypatch.setattr(transformers.CONFIG_MAPPING["llama"], "from_dict", classmethod(refuse))
    with pytest.raises(KvplanError, match=r"transformers cannot read this config \(LlamaForCausalLM\): Refused: "):
        hf_config_from({"model_type": "llama", "layer_types": ["full_attention"] * 7}, "LlamaForCausalLM", False,
                       None)


def test_catalog_planning_imports_neither_torch_nor_transformers():
    code = (
        "import sys\n"
        "from kvplan.sources.catalog import catalog_ids\n"
        "from kvplan.measure.hf_config import model_shape\n"
        "from kvplan.measure.meta_build import weights_for\n"
        "from kvplan.sources.models import resolve_config\n"
        "for model in catalog_ids():\n"
        "    resolved = resolve_config(model)\n"
        "    weights_for(model_shape(resolved.config, resolved.model_id), 'bfloat16', 2, 2)\n"
        "heavy = sorted(name for name in ('torch', 'transformers') if name in sys.modules)\n"
        "print(','.join(heavy) or 'none')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "none"
