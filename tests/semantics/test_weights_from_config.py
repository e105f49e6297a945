"""Weight layouts read from config.json: for every catalog model of a supported architecture they equal
the stored meta-device build (names, shapes, modules, layers, tie), and so do the bytes `estimate`
derives from them under TP, PP and a quantization scheme. Builds of configs outside the catalog are
compared in tests/measure/test_meta_build.py (they need torch)."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest

from kvplan.semantics.models.config_file import ResolvedConfig
from kvplan.semantics.models.reader import architecture_of
from kvplan.semantics.weights import QuantScheme, WeightLayout, estimate
from kvplan.semantics.weights_from_config import DENSE_DECODERS, layout_from_config
from kvplan.sources.catalog import catalog_ids, catalog_layouts
from kvplan.sources.models import resolve_config

DENSE_CATALOG = [model for model in catalog_ids() if architecture_of(resolve_config(model).config) in DENSE_DECODERS]
OTHER_CATALOG = [model for model in catalog_ids() if model not in DENSE_CATALOG]
SCHEMES = [QuantScheme("none"), QuantScheme("fp8", (128, 128)), QuantScheme("fp8")]


@cache
def layouts(model_id: str) -> tuple[WeightLayout, WeightLayout]:
    """(read from config.json, stored from the meta-device build)."""
    resolved = resolve_config(model_id)
    derived = layout_from_config(resolved)
    assert derived is not None
    return derived, catalog_layouts()[resolved.sha256]


def resolved_with(model_id: str, **changes: object) -> ResolvedConfig:
    resolved = resolve_config(model_id)
    return replace(resolved, config={**resolved.config, **changes})


def test_the_dense_architectures_of_the_catalog_are_read():
    found = {architecture_of(resolve_config(model).config) for model in DENSE_CATALOG}
    assert found == {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                     "Phi3ForCausalLM", "Gemma2ForCausalLM"}


@pytest.mark.parametrize("model_id", DENSE_CATALOG)
def test_layout_equals_the_stored_meta_build(model_id):
    derived, stored = layouts(model_id)
    assert derived.groups == stored.groups
    assert derived.tie_word_embeddings == stored.tie_word_embeddings
    assert replace(derived, built_with=stored.built_with) == stored
    assert derived.built_with != stored.built_with     # the method names where the layout came from


@pytest.mark.parametrize("scheme", SCHEMES, ids=lambda scheme: f"{scheme.method}-{scheme.block}")
@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 1), (1, 2), (2, 2)])
@pytest.mark.parametrize("model_id", DENSE_CATALOG)
def test_estimated_bytes_equal_the_stored_build(model_id, tp, pp, scheme):
    derived, stored = layouts(model_id)
    mine, theirs = (estimate(layout, "bfloat16", tp, pp, scheme, "test") for layout in (derived, stored))
    assert mine.per_stage_bytes == theirs.per_stage_bytes
    assert (mine.total_bytes, mine.per_rank_bytes, mine.total_params) == \
        (theirs.total_bytes, theirs.per_rank_bytes, theirs.total_params)
    assert mine.notes == theirs.notes


@pytest.mark.parametrize("model_id", OTHER_CATALOG)
def test_other_architectures_are_left_to_the_build(model_id):
    assert layout_from_config(resolve_config(model_id)) is None


def test_a_model_type_other_than_the_class_reads_is_left_to_the_build():
    assert layout_from_config(resolved_with("meta-llama/Llama-3.2-1B-Instruct", model_type="mistral")) is None


def test_a_null_head_dim_only_derives_where_the_config_class_derives_it():
    assert layout_from_config(resolved_with("Qwen/Qwen3-8B", head_dim=None)) is None
    llama = layout_from_config(resolved_with("meta-llama/Llama-3.1-8B-Instruct", head_dim=None))
    assert llama is not None and llama.groups == layouts("meta-llama/Llama-3.1-8B-Instruct")[1].groups


def test_sizes_follow_the_config():
    wider = layout_from_config(resolved_with("Qwen/Qwen2-0.5B-Instruct", intermediate_size=1024,
                                             tie_word_embeddings=False))
    derived, _ = layouts("Qwen/Qwen2-0.5B-Instruct")
    assert wider is not None and derived.tie_word_embeddings and not wider.tie_word_embeddings
    hidden, vocab, layers = derived.hidden_size, derived.vocab_size, derived.num_hidden_layers
    mlp_growth = 3 * hidden * (1024 - derived.expert_intermediate_size) * layers
    assert wider.total_params == derived.total_params + mlp_growth + vocab * hidden
