"""One rank's shard as a transformers config: heads, KV heads, MLP and vocabulary split over the
tensor-parallel ranks, the layers of the rank's pipeline stage; and the fake backend's profile run
on it (the sampler on the whole vocabulary, on the last stage only)."""

from __future__ import annotations

import json

import pytest

from kvplan.measure.backend import ModelSource
from kvplan.measure.fake import FakeBackend
from kvplan.measure.shard import RankShard, shard_config
from kvplan.semantics.memory.profile_batch import profile_batch
from kvplan.sources.catalog import CATALOG_DIR


def catalog(name: str) -> dict:
    return json.loads((CATALOG_DIR / name / "config.json").read_text())


def test_a_tensor_parallel_rank_holds_its_share_of_heads_mlp_and_vocabulary():
    llama = catalog("meta-llama--Llama-3.1-8B-Instruct")
    shard = shard_config(llama, RankShard(2, range(0, 32), True, llama["vocab_size"]))
    assert (shard["num_attention_heads"], shard["num_key_value_heads"], shard["head_dim"]) == (16, 4, 128)
    assert shard["intermediate_size"] == 14336 // 2 and shard["hidden_size"] == 4096
    assert shard["vocab_size"] == 128256 // 2 and shard["bos_token_id"] is None
    # one KV head each when there are fewer than ranks
    assert shard_config(llama, RankShard(16, range(0, 32), True, 128256))["num_key_value_heads"] == 1


def test_a_pipeline_stage_holds_its_layers():
    nemotron = catalog("nvidia--Nemotron-H-56B-Base-8K")
    pattern = nemotron["hybrid_override_pattern"]
    shard = shard_config(nemotron, RankShard(2, range(40, 80), False, nemotron["vocab_size"]))
    assert shard["num_hidden_layers"] == 40 and shard["hybrid_override_pattern"] == pattern[40:80]
    assert shard["mamba_num_heads"] == nemotron["mamba_num_heads"] // 2 and shard["n_groups"] == 4
    gemma = catalog("google--gemma-3-4b-it")
    text = shard_config(gemma, RankShard(1, range(6, 12), False, 262208))["text_config"]
    assert text["num_hidden_layers"] == 6
    # the whole model on one rank is the config itself
    assert shard_config(gemma, RankShard(1, range(0, 34), True, 262208)) is gemma


@pytest.mark.parametrize("last_stage", [True, False])
def test_the_fake_backend_runs_a_ranks_shard(tiny_config, last_stage):
    whole, half = (FakeBackend(1 << 34, "test"), FakeBackend(1 << 34, "test"))
    batch = profile_batch(256, 8)
    source = ModelSource("tiny", tiny_config, "bfloat16")
    whole.load_model(source)
    full = whole.profile(batch, 132)
    shard = RankShard(2, range(0, 1), last_stage, tiny_config["vocab_size"])
    half.load_model(ModelSource("tiny", tiny_config, "bfloat16", shard=shard))
    ranked = half.profile(batch, 132)
    # the sampler sees the gathered logits: the whole vocabulary
    assert ranked.sampler.vocab_size == full.sampler.vocab_size == 1024
    assert 0 < ranked.activation_peak_bytes < full.activation_peak_bytes
