"""Building transformers models from config dicts: bad configs are one clear line (exit 2)."""

from __future__ import annotations

import pytest
import torch

from kvplan.errors import KvplanError
from kvplan.measure.hf import build_meta_model, hf_config, safetensors_files, torch_dtype


def test_config_without_model_type_is_bad_input():
    with pytest.raises(KvplanError, match="no 'model_type'"):
        hf_config({"hidden_size": 64})


def test_unknown_model_type_is_bad_input():
    with pytest.raises(KvplanError, match="cannot build a 'no-such-model' model"):
        hf_config({"model_type": "no-such-model"})


def test_remote_code_models_say_what_they_need():
    with pytest.raises(KvplanError, match="--trust-remote-code"):
        hf_config({"model_type": "my-custom", "auto_map": {"AutoConfig": "x.Config"}})


def test_meta_build_allocates_nothing(tiny_config):
    model = build_meta_model(hf_config(tiny_config), torch.bfloat16)
    assert all(p.device.type == "meta" for p in model.parameters())
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_local_directory_without_safetensors(tmp_path):
    with pytest.raises(KvplanError, match=r"no \.safetensors weights"):
        safetensors_files(tmp_path)
    with pytest.raises(KvplanError, match="is not one"):
        safetensors_files(tmp_path / "missing")


def test_dtype_names():
    assert torch_dtype("bfloat16") is torch.bfloat16
    with pytest.raises(KvplanError, match="unknown dtype"):
        torch_dtype("bf17")
