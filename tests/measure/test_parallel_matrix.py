"""Every catalog model at TP 1, 2, 4, 8 and PP 2 (issue 24 item 1): the plan of each cell either
sizes the cache or refuses it as vLLM does (exit 2, one line); the fake backend's profile run on
every accepted cell's rank shard runs without an exception. DeepSeek-V3 at TP 8 crashed the fake
build (the shard's head_dim overrode the MLA config's own rope head size).

The profile runs on the first layers of the rank's stage, enough to hold every kind of layer the
model has (a shape error is a property of one layer's shard, not of how many repeat), and on a
small batch, so the matrix stays a few seconds; the reported command runs end to end below."""

from __future__ import annotations

import json

import pytest

from kvplan.errors import KvplanError
from kvplan.measure.backend import ModelSource
from kvplan.measure.fake import FakeBackend
from kvplan.measure.shard import RankShard
from kvplan.semantics.memory.profile_batch import profile_batch
from kvplan.semantics.releases import release_named
from kvplan.sources.catalog import catalog_config_path, catalog_ids
from kvplan.usecases.plan import PlanRequest, plan

RELEASE = release_named("0.33.0")
PARALLEL = ((1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (2, 2))
CELLS = [(model, tp, pp) for model in catalog_ids() for tp, pp in PARALLEL]


def _config(model: str) -> dict:
    found = catalog_config_path(model)
    assert found is not None
    return json.loads(found[1].read_text())


def _layers_holding_every_kind(shape, config: dict) -> int:
    """The shortest prefix of the layers that holds every kind of layer, and a MoE layer after the
    dense ones (first_k_dense_replace)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    needed = 2
    for key in ("layer_types", "layers_block_type"):
        kinds = text.get(key)
        if isinstance(kinds, list) and kinds:
            needed = max(needed, max(kinds.index(kind) for kind in set(kinds)) + 1)
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        needed = max(needed, max(pattern.index(kind) for kind in set(pattern)) + 1)
    if isinstance(text.get("first_k_dense_replace"), int):
        needed = max(needed, text["first_k_dense_replace"] + 1)
    return min(needed, shape.num_hidden_layers)


def _plan(model: str, tp: int, pp: int):
    return plan(PlanRequest.of(model=model, kv_cache_memory_bytes=20 << 30, gpu="h200-141gb",
                            tensor_parallel_size=tp, pipeline_parallel_size=pp, release=RELEASE))


@pytest.mark.parametrize(("model", "tp", "pp"), CELLS, ids=[f"{m}-tp{t}-pp{p}" for m, t, p in CELLS])
def test_every_catalog_model_plans_at_every_parallel_size(model, tp, pp):
    try:
        result = _plan(model, tp, pp)
    except KvplanError as refusal:
        # vLLM's own refusal (heads not divisible by TP), one line
        assert "divisible" in str(refusal) and "\n" not in str(refusal)
        return
    # sized, or a finding in vLLM's words (a max_model_len request does not fit)
    assert (result.sizing.num_blocks or 0) > 0 if result.fits else result.sizing.finding


def _largest_accepted_tp(model: str, pp: int) -> tuple[int, object]:
    for tp in (8, 4, 2, 1):
        try:
            return tp, _plan(model, tp, pp)
        except KvplanError:
            continue
    raise AssertionError(f"{model} plans at no tensor-parallel size")


@pytest.mark.slow
@pytest.mark.parametrize("pp", [1, 2])
@pytest.mark.parametrize("model", catalog_ids())
def test_the_fake_profile_runs_on_the_rank_shard_at_the_largest_tensor_parallel_size(model, pp):
    """The largest TP vLLM accepts divides every layer most: the shard most unlike the whole model
    (the TP 8 rank of DeepSeek-V3 crashed); with PP 2, a first stage without the sampler too."""
    tp, result = _largest_accepted_tp(model, pp)
    config = _config(model)
    layers = range(0, _layers_holding_every_kind(result.setup.shape, config))
    for last_stage in sorted({pp == 1, True}):
        backend = FakeBackend(141 << 30, "test")
        shard = RankShard(tp, layers, last_stage, result.setup.shape.vocab_size)
        backend.load_model(ModelSource(model, config, result.setup.model_dtype, shard=shard))
        measured = backend.profile(profile_batch(256, 8), 132)
        assert measured.activation_peak_bytes > 0
        assert backend.forward_peak(16) > 0


@pytest.mark.slow
def test_the_reported_deepseek_v3_tp8_plan_predicts_its_kv_memory():
    from kvplan.usecases.profile import plan_for_device

    result = plan_for_device(PlanRequest.of(model="deepseek-ai/DeepSeek-V3", gpu="h200-141gb",
                                         tensor_parallel_size=8, release=RELEASE))
    assert result.fits and result.kv_cache_memory_bytes > 30 << 30
