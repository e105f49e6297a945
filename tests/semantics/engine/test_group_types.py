"""A KV cache group's type is a spec class (issue 19): the coordinator's managers, the trace format
and the outputs all read it from the classes of `GROUP_TYPES`, so that a new attention type is a
spec class, a manager and a row of `MANAGERS`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.report.simulate_json import describe_groups
from kvplan.semantics.engine.coordinator import MANAGERS
from kvplan.semantics.engine.groups import GROUP_TYPE_OF_KIND, KVCacheGroup, engine_group, resolve_groups
from kvplan.semantics.engine.trace import parse_groups
from kvplan.semantics.engine.trace_format import GROUP
from kvplan.semantics.kv.specs import (
    GROUP_TYPES,
    LAYER_SPECS,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
    group_type,
)

# a valid trace record of each type, as the vLLM harness writes them
RECORDS = {
    FullAttentionSpec: {"type": "full_attention"},
    SlidingWindowSpec: {"type": "sliding_window", "sliding_window": 64},
    ChunkedLocalAttentionSpec: {"type": "chunked_local_attention", "attention_chunk_size": 64},
    MambaSpec: {"type": "mamba", "mamba_cache_mode": "align"},
}


def test_every_group_type_has_a_manager_and_nothing_else_does():
    assert list(MANAGERS) == list(GROUP_TYPES)


def test_a_type_is_spelt_by_its_class_kind_in_traces_and_outputs():
    assert list(GROUP.variants) == [spec.kind for spec in GROUP_TYPES] == list(GROUP_TYPE_OF_KIND)
    assert set(RECORDS) == set(GROUP_TYPES)
    for spec, record in RECORDS.items():
        GROUP.check(record, "group")
        (group,) = parse_groups([record], "trace")
        assert group.spec is spec
        (described,) = describe_groups((group,), layers_known=False)
        assert (described["type"], described["spec"]) == (record["type"], spec.__name__)


def test_a_spec_that_subclasses_a_group_type_runs_as_that_type():
    assert group_type(MLAAttentionSpec) is FullAttentionSpec
    assert engine_group("MLAAttentionSpec", 64, 2, "").spec is FullAttentionSpec
    assert group_type(UniformTypeKVCacheSpecs) is None  # type: ignore[arg-type]
    with pytest.raises(KvplanError, match="no manager for UniformTypeKVCacheSpecs"):
        engine_group("UniformTypeKVCacheSpecs", 16, 1, "")


def test_a_window_is_checked_against_the_type_it_belongs_to():
    with pytest.raises(KvplanError, match="attention_chunk_size applies only to chunked_local_attention groups"):
        resolve_groups((KVCacheGroup(SlidingWindowSpec, sliding_window=8, attention_chunk_size=8),), 16, True, 512)
    with pytest.raises(KvplanError, match="must be one of full_attention, sliding_window"):
        resolve_groups((KVCacheGroup(MLAAttentionSpec),), 16, True, 512)


def test_the_published_output_schemas_list_every_type():
    schemas = Path(__file__).resolve().parents[3] / "docs" / "schemas"
    simulate = json.loads((schemas / "simulate.json").read_text())["properties"]
    groups = simulate["engine"]["properties"]["kv_cache_groups"]["items"]["properties"]
    assert groups["type"]["enum"] == [spec.kind for spec in GROUP_TYPES]
    assert groups["spec"]["enum"] == [spec.__name__ for spec in GROUP_TYPES]
    usage = simulate["kv_usage"]["properties"]["groups"]["items"]["properties"]
    assert usage["type"]["enum"] == [spec.kind for spec in GROUP_TYPES]
    plan = json.loads((schemas / "plan.json").read_text())["$defs"]["spec"]["properties"]["type"]["enum"]
    assert plan == [*LAYER_SPECS, UniformTypeKVCacheSpecs.__name__]
