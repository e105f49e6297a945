"""A trace's config takes the scheduler's engine arguments from `EngineArgs` (the SCHEDULES role), beside
the trace format's own keys: a new SCHEDULES setting is a trace key with no list to extend."""

from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.schema import Record
from kvplan.semantics.engine.args import MODEL_LEN, SCHEDULES, named, setting
from kvplan.semantics.engine.trace import CONFIG, CONFIG_KEYS, GROUPS_KEY, parse_config
from kvplan.semantics.engine.trace_format import SCHEDULER_SETTINGS, TRACE

# the trace format's own keys: the pool, the hashing, the release and the engine loop
OWN_KEYS = {"num_gpu_blocks", "hash_algo", "hash_seed", "vllm_version", "scheduling"}
SCHEDULED_KEYS = {setting(name).key or name for name in named(SCHEDULES)}


def test_trace_config_engine_keys_are_the_schedules_fields() -> None:
    config = TRACE.fields["config"].kind
    assert isinstance(config, Record)
    assert set(config.fields) - {GROUPS_KEY} == SCHEDULED_KEYS | OWN_KEYS
    assert not SCHEDULED_KEYS & OWN_KEYS
    assert config.fields.keys() == CONFIG.fields.keys()
    # parse_config types and passes on every key the schema lets through: a new SCHEDULES setting needs its
    # place there (and in EngineConfig) too, not a silent drop
    assert set(CONFIG_KEYS) == set(SCHEDULER_SETTINGS)


def test_scheduled_keys_take_the_kind_a_trace_fixes() -> None:
    for name in named(SCHEDULES):
        declared = setting(name)
        assert SCHEDULER_SETTINGS[declared.key or name].kind == declared.fixed_range
    # max_model_len is a length in a trace: "auto" (which a plan fits) is the flag's and a check spec's only
    assert SCHEDULER_SETTINGS["max_model_len"].kind == MODEL_LEN != setting("max_model_len").kind
    with pytest.raises(KvplanError, match="max_model_len"):
        parse_config({"num_gpu_blocks": 14, "max_model_len": "auto"})
