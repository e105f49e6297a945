"""`explain` on the real logs of tests/data/logs: kvplan's sizing of each logged KV memory against
vLLM's pool figures, the memory terms against the fake profile run (pinned releases), and for the
logs that end in an error what ran out and the changes that start, checked by kvplan's sizing."""

from __future__ import annotations

import pytest

from kvplan.semantics.memory.startup_log import GIB
from kvplan.usecases.explain.explain import ExplainRequest, changed_command, explain
from kvplan.usecases.explain.log_reader import decode_log

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
A100_LOG = "vllm-0.31.0-llama-3.1-8b-a100-excerpt.log"


def run(data_dir, name, predict=False, text=None, **given):
    text = text if text is not None else decode_log((data_dir / "logs" / name).read_bytes())
    version = given.pop("vllm_version", None)
    return explain(ExplainRequest(text, name, given, version, predict_memory=predict))


def row(result, key):
    return next(row for row in result.rows if row.key == key)


@pytest.mark.parametrize(("name", "given"), [
    ("vllm-0.19.0-llama-3.1-8b-h100-tp1.log", {}),
    ("vllm-0.19.0-llama-3.1-8b-h100-tp2.log", {}),
    ("vllm-0.19.0-llama-3.1-8b-h100-kvfp8.log", {}),
    ("vllm-0.19.0-qwen2.5-7b-h100-tp1.log", {}),
    ("vllm-0.19.0-gpt-oss-20b-h100-oom.log", {}),
    (A100_LOG, {"model": LLAMA}),
])
def test_kvplans_sizing_of_the_logged_memory_gives_vllms_pool(data_dir, name, given):
    """The pool vLLM logged is kvplan's sizing of the memory vLLM logged, to the rounding of that
    memory (0.01 GiB): tokens and concurrency."""
    result = run(data_dir, name, **given)
    for key in ("kv_cache_tokens_sized", "max_concurrency_sized"):
        sized = row(result, key)
        assert sized.within, (key, sized.logged, sized.predicted, sized.tolerance)
    assert result.started == (result.log.error is None)
    assert result.shortfall is None or result.log.error is not None


def test_the_settings_say_where_they_came_from(data_dir):
    result = run(data_dir, A100_LOG, model=LLAMA)
    sources = {setting.name: setting for setting in result.settings}
    assert sources["model"].source == "flag"
    assert (sources["gpu_memory_utilization"].source, sources["gpu_memory_utilization"].line) == ("log", 6)
    assert sources["max_num_seqs"].source == "assumed" and sources["max_num_seqs"].value is None
    assert sources["gpu"].source == "catalog" and sources["gpu"].value == "a100-sxm-80gb"
    assert result.release.version == "0.33.0" and "wording" in result.release_reason


def test_a_log_without_a_model_prints_its_terms_and_says_what_it_could_not_predict(data_dir):
    result = run(data_dir, A100_LOG)
    assert result.request is None
    assert row(result, "available_kv").logged == round(56.21 * GIB)
    assert row(result, "available_kv").predicted is None
    assert any("--model" in reason for reason in result.not_predicted)


def test_a_model_kvplan_cannot_build_leaves_the_terms_unreconciled(data_dir):
    from kvplan.hub import HubAccess, hub_access

    with hub_access(HubAccess(allowed=False, reason="a test", revision=None)):
        result = run(data_dir, "vllm-0.19.0-codellama-34b-h100-tp2-refused.log", predict=True)
    assert row(result, "requested").logged == round(75.23 * GIB) and row(result, "requested").predicted is None
    assert any("cannot build" in reason for reason in result.not_predicted)
    # it still says what ran out: the refusal, 14.36 GiB short
    assert result.shortfall is not None and result.shortfall.short_bytes == round(75.23 * GIB) - round(60.87 * GIB)
    (fix,) = result.fixes
    assert fix.change == "--gpu-memory-utilization 0.76" and not fix.checked


def test_the_oom_after_capture_and_the_utilization_that_starts(data_dir):
    result = run(data_dir, "vllm-0.19.0-gpt-oss-20b-h100-oom.log", vllm_version="0.17.1")
    assert not result.started and result.shortfall is not None
    assert result.shortfall.short_bytes == (786 << 20) - round(552.5 * (1 << 20))
    first = result.fixes[0]
    # the allocation that failed, less what was free, plus vLLM's 150 MiB margin, off the KV cache
    assert first.change == "--gpu-memory-utilization 0.9452" and first.checked and first.outcome.startswith("starts")
    assert changed_command(result.command, first) == (
        "vllm serve openai/gpt-oss-20b --max-model-len 8192 --gpu-memory-utilization 0.9452 --no-enable-prefix-caching")


def _too_long(data_dir) -> str:
    """A synthetic edge case made from the real 0.31.0 log: its KV memory cut to 14.5 GiB, ending in
    vLLM 0.33.0's memory-check error for a 131,072-token request (the text of sizing.LOG_FORMATS)."""
    text = (data_dir / "logs" / A100_LOG).read_text()
    text = text.replace("Available KV cache memory: 56.21 GiB", "Available KV cache memory: 14.5 GiB")
    text = "\n".join(line for line in text.split("\n") if "KV cache size" not in line and "Free memory" not in line)
    return text + (
        "(EngineCore pid=326) ERROR 10-06 17:00:34 [core.py:1108] ValueError: To serve at least one request with the "
        "model's max seq len (131072), (16.0 GiB KV cache is needed, which is larger than the available KV cache "
        "memory (14.5 GiB). Based on the available memory, the estimated maximum model length is 118784. Try "
        "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n")


def test_kv_tokens_below_max_model_len_and_the_smallest_changes(data_dir):
    result = run(data_dir, A100_LOG, text=_too_long(data_dir), model=LLAMA, gpu="a100-sxm-80gb",
                 vllm_version="0.33.0")
    assert result.log.error is not None and result.log.error.kind == "max_model_len_too_large"
    assert result.shortfall is not None and result.shortfall.term == "KV cache memory"
    assert result.shortfall.needed_bytes == 16 * GIB
    changes = {fix.flags[0][0]: fix for fix in result.fixes}
    assert set(changes) == {"--max-model-len", "--gpu-memory-utilization", "--kv-cache-dtype",
                            "--tensor-parallel-size"}
    assert changes["--max-model-len"].flags[0][1] == str(result.sized.sizing.estimated_max_model_len)
    for fix in result.fixes:
        assert fix.checked and fix.outcome.startswith("starts"), fix
    # the utilization is the smallest that starts: one step below does not
    utilization = float(changes["--gpu-memory-utilization"].flags[0][1])
    assert 0.92 < utilization < 1.0


@pytest.mark.slow
def test_the_memory_terms_against_the_fake_profile_run(data_dir):
    """0.19.0 on an H100 with 0.17.1's rules: every term within tolerance, non-torch memory too: the
    fake backend takes it from the real H100 TP 1 logs (usecases/non_torch.py), this one among them."""
    result = run(data_dir, "vllm-0.19.0-llama-3.1-8b-h100-tp1.log", predict=True, vllm_version="0.17.1")
    assert [row.key for row in result.outside_tolerance] == []
    assert row(result, "available_kv").within and row(result, "weights").within
    assert row(result, "non_torch").predicted == row(result, "non_torch").logged == round(0.25 * 2**30)


@pytest.mark.slow
def test_non_torch_memory_under_tp_reads_as_nccl(data_dir, monkeypatch):
    """Without the TP 2 log's own figure the TP 2 start-up gets TP 1's (a lower bound), and the
    rest of its logged non-torch memory reads as NCCL buffers."""
    from kvplan.usecases import non_torch

    tp1_only = tuple(row for row in non_torch.logged_non_torch() if row.tensor_parallel_size == 1)
    monkeypatch.setattr(non_torch, "logged_non_torch", lambda: tp1_only)
    result = run(data_dir, "vllm-0.19.0-llama-3.1-8b-h100-tp2.log", predict=True, vllm_version="0.17.1")
    reading = row(result, "non_torch").reading
    assert reading is not None and "NCCL buffers under TP" in reading
    assert row(result, "non_torch").predicted == round(0.25 * 2**30)


@pytest.mark.slow
def test_non_torch_memory_under_tp_is_predicted_from_its_log(data_dir):
    result = run(data_dir, "vllm-0.19.0-llama-3.1-8b-h100-tp2.log", predict=True, vllm_version="0.17.1")
    assert row(result, "non_torch").within and row(result, "available_kv").within


def test_a_release_kvplan_does_not_reproduce_is_predicted_by_the_policies_its_lines_show(data_dir):
    """A 0.2x-like log (synthetic: the real 0.19.0 log renamed 0.27.1, its CUDA-graph estimate taken
    from the budget as from 0.21.0): 0.17.1 shares two of the three policies it shows, and the
    reason names the one it does not share."""
    text = (data_dir / "logs" / "vllm-0.19.0-llama-3.1-8b-h100-tp1.log").read_text()
    text = text.replace("version 0.19.0", "version 0.27.1").replace("(v0.19.0)", "(v0.27.1)")
    text = text.replace("In v0.19, CUDA graph memory profiling will be enabled by default",
                        "CUDA graph memory profiling is enabled (default since v0.21.0). The current "
                        "--gpu-memory-utilization=0.9500 is equivalent to --gpu-memory-utilization=0.9394 without")
    result = run(data_dir, "renamed.log", text=text)
    assert result.release.version == "0.17.1"
    assert "unlike 0.17.1, its lines show cuda_graphs_in_budget" in result.release_reason


def test_an_info_level_log_without_the_total_infers_the_gpu_from_its_cuda_graph_lines(data_dir):
    """The real 0.19.0 log at INFO level (its DEBUG lines dropped, as `vllm serve` prints by default):
    no line gives the total, but the CUDA-graph estimate and the utilization it is worth do."""
    text = (data_dir / "logs" / "vllm-0.19.0-llama-3.1-8b-h100-tp1.log").read_text()
    info = "\n".join(line for line in text.split("\n") if " DEBUG " not in line)
    result = run(data_dir, "info.log", text=info)
    sources = {setting.name: setting for setting in result.settings}
    # 0.84 GiB over 0.0106 of the total: 79.25 GiB, to about 1.5%: an 80 GB GPU, the nearest named
    assert sources["gpu"].source == "catalog" and "CUDA-graph lines" in (sources["gpu"].note or "")
    assert sources["gpu"].value in ("a100-sxm-80gb", "h100-sxm-80gb") and "h100-sxm-80gb" in sources["gpu"].note + \
        sources["gpu"].value
    assert result.logged_budget is not None
    assert result.logged_budget.available_kv_bytes == round(58.11 * GIB)
    assert row(result, "kv_cache_tokens_sized").within


@pytest.mark.slow
def test_a_034_log_reconciles_the_after_warmup_terms_with_the_measured_path(data_dir):
    """0.34.0's "Memory after warmup" and "Extended KV cache" terms are predicted by the measured path
    (usecases/measured_sizing.py): each row is the predicted term, and the pool rows follow it; with
    the extensible cache turned off the prediction takes the estimate path and says so."""
    result = run(data_dir, "synthetic-0.34.0-extensible-kv-cache.log", predict=True, vllm_version="0.34.0",
                 gpu="h100-sxm-80gb")
    measured = result.predicted_plan.measured
    assert measured is not None
    assert row(result, "free_after_warmup").predicted == measured.terms.free_bytes
    assert row(result, "committed_kv").predicted == measured.terms.committed_bytes
    assert row(result, "kept_for_activations").predicted == measured.terms.kept_bytes
    assert row(result, "extended_kv").predicted == measured.footprint_bytes
    block_tokens = result.predicted_plan.summary.gpu_kv_cache_tokens // measured.num_blocks
    assert row(result, "kv_cache_tokens").predicted == measured.num_blocks * block_tokens
    assert row(result, "committed_kv").within   # the null block's granules: one 2 MiB granule per layer segment
    off = run(data_dir, "synthetic-0.34.0-extensible-kv-cache.log", predict=True, vllm_version="0.34.0",
              gpu="h100-sxm-80gb", enable_extensible_kv_cache=False)
    assert off.predicted_plan.measured is None
    assert row(off, "measured_kv").predicted is None and "estimate path" in row(off, "measured_kv").note
