"""The cuda backend on a real GPU (skipped where torch sees none: CI and the development machines
have no GPU; `scripts/device_check.sh` runs this file on one). The fakes of torch.cuda in
test_cuda.py check the arithmetic; these check that the calls mean on a GPU what the arithmetic
assumes: allocated bytes across loading are the parameters, the profile run's peak is above what it
leaves, a CUDA graph of the Hugging Face forward can be captured into a throw-away pool, the KV
pool is committed in full and its slot mapping round-trips on the device."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from kvplan.measure.backend import ModelSource  # noqa: E402
from kvplan.measure.cuda import CudaBackend, cuda_usable  # noqa: E402
from kvplan.semantics.memory.profile_batch import ProfileBatch  # noqa: E402

pytestmark = pytest.mark.skipif(not cuda_usable(), reason="needs a CUDA GPU (scripts/device_check.sh runs it on one)")


@pytest.fixture
def loaded(tiny_config: dict[str, Any]) -> tuple[CudaBackend, Any]:
    backend = CudaBackend()
    backend.snapshot()
    weights = backend.load_model(ModelSource("tiny-qwen2", tiny_config, "bfloat16"))
    return backend, weights


def test_loading_allocates_the_parameters(loaded: tuple[CudaBackend, Any]) -> None:
    _backend, weights = loaded
    assert weights.parameter_bytes > 0
    # the caching allocator rounds every allocation up to 512 B; the rotary buffers come on top
    assert weights.parameter_bytes <= weights.weights_bytes < weights.parameter_bytes + 64 * 1024


def test_the_profile_run_peaks_above_what_it_leaves(loaded: tuple[CudaBackend, Any]) -> None:
    backend, _ = loaded
    for sampler in ("v1_one_pass", "v2_default_and_warmup"):
        activation = backend.profile(ProfileBatch(256, 8), multiprocessors=132, sampler=sampler)
        assert activation.activation_peak_bytes > 0
        assert 0 <= activation.retained_bytes < activation.activation_peak_bytes
        assert activation.consumed_bytes is not None


def test_graphs_of_the_forward_capture_into_a_throwaway_pool(loaded: tuple[CudaBackend, Any]) -> None:
    backend, _ = loaded
    free_before = int(torch.cuda.mem_get_info()[0])
    samples = backend.graph_samples((64, 32))
    assert len(samples) == 2 and samples[0] > 0 and samples[1] >= 0
    torch.cuda.synchronize()
    # the graphs and their pool are gone afterwards
    assert int(torch.cuda.mem_get_info()[0]) >= free_before - 2 * 1024 * 1024


def test_the_cli_profiles_and_allocates_on_the_gpu(kvplan: Any, tmp_path: Path, tiny_config: dict[str, Any]) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(tiny_config))
    for release in ("0.17.1", "0.33.0"):
        code, out, err = kvplan("profile", "--model", str(config), "--backend", "cuda", "--max-model-len", "1024",
                                "--vllm-version", release, "--json")
        assert code == 0, err
        document = json.loads(out)
        assert document["backend"] == "cuda" and not document["predicted"]
        allocation = document["allocation"]
        assert allocation["real"] and allocation["device"].startswith("cuda")
        # the whole pool is committed on the device, and the slot mapping round-trips there
        assert allocation["committed_bytes"] >= allocation["pool_bytes"]
        assert allocation["slot_mapping_check"]["passed"], allocation["slot_mapping_check"]["detail"]
        if release == "0.33.0":
            assert document["cuda_graph_estimate"]["method"] == "measured"
