"""Non-torch memory predicted from real vLLM logs instead of 0 (issue 24, item 3): the table is what
scripts/extract_non_torch.py extracts from tests/data/logs, the rule of usecases/non_torch.py picks
the figure a setup gets (and says where it came from), and plan and profile carry it into the KV
memory of each release's formula, with its source in console and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.gpus.catalog import get_gpu
from kvplan.semantics.releases import RELEASES
from kvplan.usecases.non_torch import logged_non_torch, logged_readings, predict_non_torch, table_of
from tests.data_scripts import assert_up_to_date
from tests.edge import offline_home, run_cli

REPO = Path(__file__).resolve().parents[2]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
RULES_0_17_1 = RELEASES["0.17.1"]


def _reading(log: str, gpu: str, tp: int, gib: float) -> dict[str, object]:
    return {"log": log, "vllm_version": "0.19.0", "gpu": gpu, "tensor_parallel_size": tp, "rules": "0.17.1",
            "non_kv_memory": "weights_peak_non_torch", "non_torch_bytes": int(gib * 2**30)}


def test_the_table_is_what_the_script_extracts_from_the_real_logs():
    assert_up_to_date("extract_non_torch.py")


def test_every_figure_is_a_real_log_s_own_line():
    readings = logged_readings()
    assert readings, "the real H100 logs give non-torch memory"
    for reading in readings:
        assert not Path(str(reading["log"])).name.startswith("synthetic-")
        text = (REPO / str(reading["log"])).read_text()
        gib = int(reading["non_torch_bytes"]) / 2**30  # type: ignore[call-overload]
        assert f"{gib:.2f} GiB for non-torch memory" in text or f"non-torch forward increase memory: {gib:.2f}GiB" \
            in text, reading
    # the table is the readings grouped: a median per (GPU, TP)
    assert table_of(readings) == logged_non_torch()


def test_the_same_gpu_and_tp_comes_first_and_names_its_log():
    table = table_of([_reading("a.log", "h100-sxm-80gb", 1, 0.25), _reading("b.log", "h100-sxm-80gb", 2, 2.07)])
    one = predict_non_torch(get_gpu("h100-sxm-80gb"), 1, RULES_0_17_1, table)
    two = predict_non_torch(get_gpu("h100-sxm-80gb"), 2, RULES_0_17_1, table)
    assert one is not None and one.non_torch_bytes == int(0.25 * 2**30)
    assert one.source == "predicted from a real vLLM log of h100-sxm-80gb TP 1 (vLLM 0.19.0): a.log"
    assert two is not None and two.non_torch_bytes == int(2.07 * 2**30) and two.source.endswith(": b.log")


def test_a_gpu_of_the_same_family_takes_its_figure_and_says_so():
    table = table_of([_reading("a.log", "h100-sxm-80gb", 1, 0.25)])
    h200 = predict_non_torch(get_gpu("h200-141gb"), 1, RULES_0_17_1, table)
    assert h200 is not None and h200.non_torch_bytes == int(0.25 * 2**30)
    assert "no log of h200-141gb: the same family (compute capability 9.0)" in h200.source
    # another architecture, or AMD: no figure (the caller takes 0 and warns)
    assert predict_non_torch(get_gpu("a100-sxm-80gb"), 1, RULES_0_17_1, table) is None
    assert predict_non_torch(get_gpu("mi300x-192gb"), 1, RULES_0_17_1, table) is None


def test_tp_without_its_own_log_takes_the_nearest_tp_above_one_never_for_tp_1():
    table = table_of([_reading("two.log", "h100-sxm-80gb", 2, 2.07), _reading("eight.log", "h100-sxm-80gb", 8, 3.0)])
    four = predict_non_torch(get_gpu("h100-sxm-80gb"), 4, RULES_0_17_1, table)
    assert four is not None and four.non_torch_bytes == int(2.07 * 2**30)   # a tie: the lower
    assert "no log at TP 4" in four.source
    assert predict_non_torch(get_gpu("h100-sxm-80gb"), 6, RULES_0_17_1, table).non_torch_bytes == int(3.0 * 2**30)
    # a TP > 1 figure holds NCCL buffers, which TP 1 has none of
    assert predict_non_torch(get_gpu("h100-sxm-80gb"), 1, RULES_0_17_1, table) is None


def test_tp_above_one_with_only_a_tp_1_log_is_a_lower_bound():
    table = table_of([_reading("one.log", "h100-sxm-80gb", 1, 0.25)])
    two = predict_non_torch(get_gpu("h100-sxm-80gb"), 2, RULES_0_17_1, table)
    assert two is not None and two.non_torch_bytes == int(0.25 * 2**30)
    assert "no log at TP 2: a lower bound, without the NCCL buffers TP > 1 adds" in two.source


def test_a_release_of_another_formula_is_told_where_the_figure_was_logged():
    table = table_of([_reading("one.log", "h100-sxm-80gb", 1, 0.25)])
    own = predict_non_torch(get_gpu("h100-sxm-80gb"), 1, RULES_0_17_1, table)
    other = predict_non_torch(get_gpu("h100-sxm-80gb"), 1, RELEASES["0.33.0"], table)
    assert own is not None and "formula" not in own.source
    assert other is not None and other.non_torch_bytes == own.non_torch_bytes
    assert "logged under 0.17.1's formula; vLLM 0.33.0 counts it inside consumed memory" in other.source


def _plan(*flags: str) -> dict[str, object]:
    with offline_home():
        code, out, err = run_cli(["plan", "--model", MODEL, "--gpu", "h100-sxm-80gb", *flags, "--json"])
    assert code == 0, err
    document: dict[str, object] = json.loads(out)
    return document


@pytest.mark.slow
@pytest.mark.parametrize("release", sorted(RELEASES))
def test_plan_takes_the_logged_figure_into_each_release_formula(release):
    """TP 2's NCCL buffers (2.07 GiB in the log) leave that much less KV memory than TP 1's figure
    would, in every release's formula: a sum in 0.17.1's non-KV memory, inside consumed memory in
    0.33.0's, inside what 0.34.0's measured path finds resident after warmup."""
    [tp1] = [row for row in logged_non_torch() if row.gpu == "h100-sxm-80gb" and row.tensor_parallel_size == 1]
    [tp2] = [row for row in logged_non_torch() if row.gpu == "h100-sxm-80gb" and row.tensor_parallel_size == 2]
    document = _plan("-tp", "2", "--vllm-version", release)
    term = document["non_torch_memory"]
    assert isinstance(term, dict) and term["bytes"] == tp2.non_torch_bytes
    assert term["source"].startswith("predicted from a real vLLM log of h100-sxm-80gb TP 2")
    assert tp2.logs[0] in term["source"]
    assert not any("taken as 0" in warning for warning in document["warnings"])  # type: ignore[attr-defined]
    one = _plan("-tp", "1", "--vllm-version", release)["non_torch_memory"]
    assert isinstance(one, dict) and one["bytes"] == tp1.non_torch_bytes


def test_plan_shows_the_term_and_its_source_on_the_console():
    with offline_home():
        code, out, err = run_cli(["plan", "--model", MODEL, "--gpu", "h100-sxm-80gb", "-tp", "2"])
    assert code == 0, err
    text = " ".join(out.split())
    assert ("non-torch memory 2.07 GiB per GPU, predicted from a real vLLM log of h100-sxm-80gb TP 2 (vLLM 0.19.0): "
            "tests/data/logs/vllm-0.19.0-llama-3.1-8b-h100-tp2.log") in text


def test_a_gpu_without_a_log_stays_at_0_with_the_warning():
    with offline_home():
        code, out, err = run_cli(["plan", "--model", MODEL, "--gpu", "a100-sxm-80gb", "--json"])
    assert code == 0, err
    document = json.loads(out)
    assert document["non_torch_memory"] == {"bytes": 0, "source": "assumed 0"}
    assert any("no real vLLM log of this GPU (or its family) at TP 1" in warning for warning in document["warnings"])


def test_a_given_kv_memory_has_no_non_torch_term():
    with offline_home():
        code, out, err = run_cli(["plan", "--model", MODEL, "--kv-cache-memory", "10GiB", "--max-model-len", "8192",
                                  "--json"])
    assert code == 0, err
    assert json.loads(out)["non_torch_memory"] is None
