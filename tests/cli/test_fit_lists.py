"""fit's comma lists are made from `EngineArgs`: one option per setting with the SEARCHES role, under
vLLM's spellings (the old ones and vLLM's prefixes hidden), with the list's help and default its
`Setting` declares, each value read by the setting's own reader, and one axis of the search each."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.main import get_command

from kvplan.cli import app
from kvplan.cli.options import FIT_FIXED, FITTING
from kvplan.semantics.engine.args import SEARCHES, SIZES, named, setting
from kvplan.usecases.fit.request import SEARCHED, SearchSpace, unlisted
from tests.edge import run_cli

FIT = ["fit", "-w", str(Path(__file__).resolve().parents[2] / "examples" / "workloads" / "chat-5rps.json"),
       "--gpus", "l4-24gb"]


def _fit_options() -> dict[str, tuple[tuple[str, ...], bool, str | None, object]]:
    """fit's options by the spellings they take: (spellings, hidden, help, default)."""
    command = get_command(app).commands["fit"]
    return {param.name: (tuple(param.opts), param.hidden, param.help, param.default) for param in command.params}


def test_the_list_options_are_exactly_the_searched_settings():
    options = _fit_options()
    lists = {name.removesuffix("_list") for name in options if name.endswith("_list")}
    assert lists == set(named(SEARCHES)) == set(SEARCHED)
    for name in SEARCHED:
        declared = setting(name)
        assert declared.list_help, f"{name} is searched by fit but declares no list help"
        assert options[f"{name}_list"] == (declared.flags, False, declared.list_help, declared.list_default)
        if declared.hidden_flags:
            assert options[f"{name}_list_alias"][:2] == (declared.hidden_flags, True)
        if declared.prefix_flags:
            assert options[f"{name}_list_prefix"][:2] == (declared.prefix_flags, True)
    # every other option of fit's takes one value: no searched setting is also a single-valued flag
    spellings = [spelling for opts, _, _, _ in options.values() for spelling in opts]
    assert len(spellings) == len(set(spellings))
    assert not set(FITTING) & set(SEARCHED)
    # the sizing settings fit searches no list of are what every configuration takes as given
    assert set(FIT_FIXED) == set(named(SIZES)) - set(SEARCHED)


def test_every_searched_setting_is_an_axis_of_the_search_space():
    space = SearchSpace(gpus=("l4-24gb",))
    assert {name: space.values(name) for name in SEARCHED} == {name: unlisted(name) for name in SEARCHED}
    assert space.values("tensor_parallel_size") == (1,) and space.values("kv_cache_dtype") == ("auto",)
    assert space.values("max_num_seqs") == (None,) and space.values("kv_cache_memory_bytes") == ()
    assert space.with_values(max_num_seqs=(8, 16)).values("max_num_seqs") == (8, 16)
    with pytest.raises(ValueError, match="fit has no list of"):
        space.with_values(block_size=(16,))


@pytest.mark.parametrize(("given", "says"), [
    (["-tp", "1,4097"], "--tensor-parallel-size: 4097 is out of range: expected an integer from 1 to 4,096"),
    (["--tp", "0"], "--tensor-parallel-size: 0 is out of range"),
    (["-pp", "0"], "--pipeline-parallel-size: 0 is out of range"),
    (["--kv-cache-dtype", "auto," + "x" * 65], "--kv-cache-dtype: expected a non-empty string of at most 64"),
    (["--gpu-memory-utilization", "0.5,1.5"], "--gpu-memory-utilization: 1.5 is out of range"),
    (["--kv-cache-memory-bytes", "1GiB,0"], "--kv-cache-memory-bytes: 0 bytes is out of range"),
    (["--kv-cache-memory", "0"], "--kv-cache-memory: 0 bytes is out of range"),
    (["--max-num-seqs", "8,10000000"], "--max-num-seqs: 10000000 is out of range"),
    (["--max-num-batched-tokens", "8K,200000000"], "--max-num-batched-tokens: 200000000 is out of range"),
    (["--max-model-len", "4096,1"], "--max-model-len: 1 is out of range"),
    (["--max-model-len", "4096,auto"], "--max-model-len: give lengths to try"),
    # not a number at all: what the flag's value is, as plan says it
    (["-tp", "1,two"], "--tensor-parallel-size: 'two' is not an integer"),
    (["--max-num-seqs", "8.5"], "--max-num-seqs: '8.5' is not an integer"),
    (["--gpu-memory-utilization", "0.5,abc"], "--gpu-memory-utilization: 'abc' is not a number"),
])
def test_a_value_out_of_range_in_a_list_is_refused_naming_the_flag(given, says):
    code, out, err = run_cli([*FIT, *given])
    *deprecated, refusal = err.splitlines()
    assert code == 2 and out == "", err
    # an old spelling still says which one to give, before the refusal
    assert deprecated == (["kvplan: --tp is deprecated: give --tensor-parallel-size (vLLM's spelling)"]
                          if given[0] == "--tp" else [])
    assert refusal.startswith("kvplan: error: ") and says in refusal, err
