"""The fake backend's prediction: golden numbers from docs/prediction.md §8, and
agreement with a real CPU forward of the same model."""

from __future__ import annotations

import json

import pytest

from kvplan.measure.backend import ModelSource
from kvplan.measure.cpu import CpuBackend
from kvplan.measure.fake import CHECK_POOL_BLOCKS, FakeBackend
from kvplan.semantics.kv.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor
from kvplan.semantics.memory.profile_batch import profile_batch
from kvplan.sources.catalog import CATALOG_DIR
from kvplan.units import round_up

H100 = 85_045_477_376


def bundled_config(name):
    return json.loads((CATALOG_DIR / name / "config.json").read_text())


@pytest.mark.parametrize(
    ("name", "parameters", "peak"),
    [
        # 8192 tokens in one sequence, logits at its last position only (keep=1)
        ("Qwen--Qwen2-0.5B-Instruct", 988_065_536, 299_958_272),
        ("meta-llama--Meta-Llama-3-8B-Instruct", 16_060_522_496, 977_338_368),
    ],
)
def test_golden_fake_peaks(name, parameters, peak):
    config = bundled_config(name)
    backend = FakeBackend(H100, "h100-sxm-80gb")
    weights = backend.load_model(ModelSource(name, config, "bfloat16"))
    assert weights.parameter_bytes == parameters
    # every parameter and buffer rounded to 512 bytes: a little above the parameter bytes
    assert parameters <= weights.weights_bytes < parameters + 512 * 1000
    measured = backend.profile(profile_batch(8192, 1), 132)
    assert measured.activation_peak_bytes == peak
    assert measured.non_torch_increase_bytes is None


def test_tied_embeddings_count_once(make_tiny_config):
    tied = FakeBackend(H100, "x").load_model(ModelSource("t", make_tiny_config(), "bfloat16"))
    untied = FakeBackend(H100, "x").load_model(
        ModelSource("u", make_tiny_config(tie_word_embeddings=False), "bfloat16")
    )
    assert untied.parameter_bytes - tied.parameter_bytes == 1024 * 64 * 2


@pytest.mark.parametrize(("tokens", "seqs"), [(2048, 1), (2048, 256), (300, 7), (512, 64)])
def test_fake_and_cpu_agree_on_the_activation_peak(tiny_config, tokens, seqs):
    # the fake backend builds this Qwen2 itself (kvplan.measure.decoder), the cpu backend with transformers
    batch = profile_batch(tokens, seqs)
    peaks = []
    for backend in (FakeBackend(1 << 30, "x"), CpuBackend(1 << 30, "x")):
        backend.load_model(ModelSource("tiny", tiny_config, "bfloat16"))
        peaks.append(backend.profile(batch, 132).activation_peak_bytes)
    fake, cpu = peaks
    assert abs(fake - cpu) <= 0.01 * cpu


def test_an_architecture_kvplan_does_not_build_goes_through_transformers_on_fake_tensors(make_tiny_config):
    phi3 = make_tiny_config(architectures=["Phi3ForCausalLM"], model_type="phi3", tie_word_embeddings=False,
                            eos_token_id=2, pad_token_id=0)
    batch = profile_batch(300, 7)
    fake, cpu = FakeBackend(1 << 30, "x"), CpuBackend(1 << 30, "x")
    for backend in (fake, cpu):
        backend.load_model(ModelSource("tiny", phi3, "bfloat16"))
    measured = fake.profile(batch, 132)
    assert measured.how.startswith("fake-tensor forward")
    assert measured.activation_peak_bytes == cpu.profile(batch, 132).activation_peak_bytes


def test_allocation_is_exact_on_meta_and_checked_on_a_small_real_pool():
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype="bfloat16")
    names = tuple(f"model.layers.{i}.self_attn.attn" for i in range(24))
    config = KVCacheConfig(
        680_593, tuple(KVCacheTensor(8192 * 680_593, (n,)) for n in names), (KVCacheGroupSpec(names, spec),)
    )
    report = FakeBackend(H100, "x").allocate(config, "flash_attn")
    assert not report.real and report.device == "meta" and report.committed_bytes is None
    assert report.pool_bytes == 24 * 8192 * 680_593 and report.num_tensors == 24
    assert report.layouts[0].shapes == ((2, 680_593, 16, 2, 64),)
    assert report.check.passed and report.check_pool_blocks == CHECK_POOL_BLOCKS


def test_the_profile_run_makes_the_releases_sampler_passes(tiny_config):
    """V1's one pass (fp32 logits, probabilities and noise) against V2's default and warm-up passes
    (one fp32 copy filtered in place, its top-k/top-p scratch kept cached: retained)."""
    backend = FakeBackend(H100, "h100-sxm-80gb")
    backend.load_model(ModelSource("tiny", tiny_config, "bfloat16"))
    batch = profile_batch(64, 16)
    v1 = backend.profile(batch, 132, "v1_one_pass")
    v2 = backend.profile(batch, 132, "v2_default_and_warmup")
    vocab = v1.sampler.vocab_size
    assert v1.retained_bytes == 0
    # the Triton kernel's scratch: a row per program (16 requests -> 16 rows) of float32 logits
    assert v2.retained_bytes == round_up(16 * vocab * 4, 512)
    # V1 holds fp32 logits, probabilities and noise at once; V2 only its fp32 copy and the scratch
    assert v2.activation_peak_bytes < v1.activation_peak_bytes


def test_the_forward_alone_peaks_below_the_profile_run(tiny_config):
    backend = FakeBackend(H100, "h100-sxm-80gb")
    backend.load_model(ModelSource("tiny", tiny_config, "bfloat16"))
    assert 0 < backend.forward_peak(16) < backend.forward_peak(64)
    assert backend.forward_peak(64) <= backend.profile(profile_batch(64, 16), 132).activation_peak_bytes


@pytest.mark.parametrize("name", ["Qwen--Qwen2-0.5B-Instruct", "meta-llama--Llama-3.1-8B-Instruct", "Qwen--Qwen3-8B"])
@pytest.mark.parametrize(("tokens", "seqs"), [(8192, 1), (2048, 256)])
def test_two_layers_give_the_peak_of_all_of_them(name, tokens, seqs):
    """The fake backend runs the first two of its identical decoder layers: the same peak, the same
    bytes kept and the same graph-pool forward as through every layer."""
    backend = FakeBackend(H100, "h100-sxm-80gb")
    backend.load_model(ModelSource(name, bundled_config(name), "bfloat16"))
    decoder = backend._model.model
    assert decoder.run_two_layers and len(decoder.layers) > 2
    batch = profile_batch(tokens, seqs)
    for sampler in ("v1_one_pass", "v2_default_and_warmup"):
        elided = backend.profile(batch, 132, sampler)
        decoder.run_two_layers = False
        full = backend.profile(batch, 132, sampler)
        decoder.run_two_layers = True
        assert (elided.activation_peak_bytes, elided.retained_bytes) == (full.activation_peak_bytes,
                                                                         full.retained_bytes)
    elided_graph = backend.forward_peak(512)
    decoder.run_two_layers = False
    assert backend.forward_peak(512) == elided_graph
