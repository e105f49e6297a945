"""Tiny hand-written ModelShape factories for the catalog models (values from their config.json,
layer kinds as vLLM's model code assigns them), and the sizing cases computed by each release's own
functions (40 of vLLM 0.17.1, 38 of vLLM 0.33.0)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvplan.semantics.models.shape import HOOK_SSM_DTYPE, LayerShape, MambaState, ModelShape
from kvplan.semantics.releases import Release, release_named
from kvplan.sources.catalog import CATALOG_DIR

SIZING_DIR = Path(__file__).resolve().parents[1] / "data" / "sizing"
CASES_FILE = SIZING_DIR / "vllm-0.17.1-cases.json"
# the sizing cases of each release, computed by its own planning functions
CASES_FILES = {version: SIZING_DIR / f"vllm-{version}-cases.json" for version in ("0.17.1", "0.33.0", "0.34.0")}


def _attention_model(
    model_id: str, architecture: str, model_type: str, layers: int, heads: int, kv_heads: int,
    head: int, max_len: int, *, window: int | None = None, is_sliding: Callable[[int], bool] = lambda i: True,
    prefix: str = "model.layers", config_dtype: str | None = "bfloat16",
) -> ModelShape:
    def layer(i: int) -> LayerShape:
        sliding = window is not None and is_sliding(i)
        return LayerShape(
            index=i, name=f"{prefix}.{i}.self_attn.attn", kind="sliding_window" if sliding else "full",
            num_kv_heads=kv_heads, head_size=head, head_size_v=head,
            sliding_window=window if sliding else None,
        )

    return ModelShape(
        model_id=model_id, architecture=architecture, model_type=model_type, config_dtype=config_dtype,
        num_hidden_layers=layers, hidden_size=heads * head, num_attention_heads=heads, num_kv_heads=kv_heads,
        head_size=head, vocab_size=0, max_model_len=max_len, layers=tuple(layer(i) for i in range(layers)),
    )


def _mla_model(model_id: str, architecture: str, model_type: str, layers: int, heads: int) -> ModelShape:
    latent = 512 + 64  # kv_lora_rank + qk_rope_head_dim
    return ModelShape(
        model_id=model_id, architecture=architecture, model_type=model_type, config_dtype="bfloat16",
        num_hidden_layers=layers, hidden_size=0, num_attention_heads=heads, num_kv_heads=heads,
        head_size=latent, vocab_size=0, max_model_len=163840, use_mla=True, qk_nope_head_dim=128,
        layers=tuple(
            LayerShape(index=i, name=f"model.layers.{i}.self_attn.attn", kind="mla", num_kv_heads=1,
                       head_size=latent, head_size_v=latent)
            for i in range(layers)
        ),
    )


def _qwen3_next() -> ModelShape:
    gdn = MambaState(
        mamba_type="gdn_attention", conv_kernel=4, linear_num_key_heads=16, linear_key_head_dim=128,
        linear_num_value_heads=32, linear_value_head_dim=128,
    )

    def layer(i: int) -> LayerShape:
        if (i + 1) % 4 == 0:  # vLLM's Qwen3NextConfig: every 4th layer is full attention
            return LayerShape(index=i, name=f"model.layers.{i}.self_attn.attn", kind="full",
                              num_kv_heads=2, head_size=256, head_size_v=256)
        return LayerShape(index=i, name=f"model.layers.{i}.linear_attn", kind="mamba", mamba=gdn)

    return ModelShape(
        model_id="Qwen/Qwen3-Next-80B-A3B-Thinking", architecture="Qwen3NextForCausalLM",
        model_type="qwen3_next", config_dtype="bfloat16", num_hidden_layers=48, hidden_size=2048,
        num_attention_heads=16, num_kv_heads=2, head_size=256, vocab_size=0, max_model_len=262144,
        is_hybrid=True, layers=tuple(layer(i) for i in range(48)),
    )


def _nemotron_h() -> ModelShape:
    config = json.loads((CATALOG_DIR / "nvidia--Nemotron-H-56B-Base-8K" / "config.json").read_text())
    # vLLM's NemotronH hook: the ssm state is float16 when the config names no dtype
    mamba2 = MambaState(
        mamba_type="mamba2", conv_kernel=4, num_heads=256, head_dim=64, n_groups=8, state_size=256,
        chunk_size=128, ssm_dtype=HOOK_SSM_DTYPE,
    )

    def layer(i: int, char: str) -> LayerShape:
        if char == "M":
            return LayerShape(index=i, name=f"model.layers.{i}.mixer", kind="mamba", mamba=mamba2)
        if char == "*":
            return LayerShape(index=i, name=f"model.layers.{i}.mixer.attn", kind="full",
                              num_kv_heads=8, head_size=128, head_size_v=128)
        return LayerShape(index=i, name=f"model.layers.{i}.mixer", kind="none")

    return ModelShape(
        model_id="nvidia/Nemotron-H-56B-Base-8K", architecture="NemotronHForCausalLM",
        model_type="nemotron_h", config_dtype="bfloat16", num_hidden_layers=118, hidden_size=8192,
        num_attention_heads=64, num_kv_heads=8, head_size=128, vocab_size=0, max_model_len=8192,
        is_hybrid=True,
        layers=tuple(layer(i, char) for i, char in enumerate(config["hybrid_override_pattern"])),
    )


def _build(model_id: str) -> ModelShape:
    llama, mistral = "LlamaForCausalLM", "MistralForCausalLM"
    simple = {
        "HuggingFaceTB/SmolLM2-135M-Instruct": (llama, "llama", 30, 9, 3, 64, 8192),
        "Qwen/Qwen2-0.5B-Instruct": ("Qwen2ForCausalLM", "qwen2", 24, 14, 2, 64, 32768),
        "Qwen/Qwen2.5-7B-Instruct": ("Qwen2ForCausalLM", "qwen2", 28, 28, 4, 128, 32768),
        "Qwen/Qwen3-30B-A3B": ("Qwen3MoeForCausalLM", "qwen3_moe", 48, 32, 4, 128, 40960),
        "Qwen/Qwen3-8B": ("Qwen3ForCausalLM", "qwen3", 36, 32, 8, 128, 40960),
        "meta-llama/Llama-3.1-70B-Instruct": (llama, "llama", 80, 64, 8, 128, 131072),
        "meta-llama/Llama-3.1-8B-Instruct": (llama, "llama", 32, 32, 8, 128, 131072),
        "meta-llama/Llama-3.2-1B-Instruct": (llama, "llama", 16, 32, 8, 64, 131072),
        "meta-llama/Meta-Llama-3-8B-Instruct": (llama, "llama", 32, 32, 8, 128, 8192),
        "mistralai/Mistral-7B-Instruct-v0.3": (mistral, "mistral", 32, 32, 8, 128, 32768),
        "mistralai/Mixtral-8x7B-Instruct-v0.1": ("MixtralForCausalLM", "mixtral", 32, 32, 8, 128, 32768),
    }
    if model_id in simple:
        return _attention_model(model_id, *simple[model_id])
    if model_id == "microsoft/Phi-3-mini-4k-instruct":  # config-wide window: every layer
        return _attention_model(model_id, "Phi3ForCausalLM", "phi3", 32, 32, 32, 96, 4096, window=2047)
    if model_id == "mistralai/Mistral-7B-Instruct-v0.1":
        return _attention_model(model_id, mistral, "mistral", 32, 32, 8, 128, 32768, window=4096)
    if model_id == "google/gemma-2-9b-it":  # layer_types: sliding on even layers
        return _attention_model(model_id, "Gemma2ForCausalLM", "gemma2", 42, 16, 8, 256, 8192,
                                window=4096, is_sliding=lambda i: i % 2 == 0)
    if model_id == "google/gemma-3-4b-it":  # transformers' defaults: pattern 6, every 6th layer full
        return _attention_model(
            model_id, "Gemma3ForConditionalGeneration", "gemma3", 34, 8, 4, 256, 131072, window=1024,
            is_sliding=lambda i: (i + 1) % 6 != 0, prefix="language_model.model.layers",
        )
    if model_id == "openai/gpt-oss-20b":  # gpt_oss.py: window on even layer indices; no torch_dtype
        return _attention_model(model_id, "GptOssForCausalLM", "gpt_oss", 24, 64, 8, 64, 131072,
                                window=128, is_sliding=lambda i: i % 2 == 0, config_dtype=None)
    if model_id == "deepseek-ai/DeepSeek-V2-Lite-Chat":
        return _mla_model(model_id, "DeepseekV2ForCausalLM", "deepseek_v2", 27, 16)
    if model_id == "deepseek-ai/DeepSeek-V3":  # the MTP layer is not built without speculative decoding
        return _mla_model(model_id, "DeepseekV3ForCausalLM", "deepseek_v3", 61, 128)
    if model_id == "Qwen/Qwen3-Next-80B-A3B-Thinking":
        return _qwen3_next()
    if model_id == "nvidia/Nemotron-H-56B-Base-8K":
        return _nemotron_h()
    raise KeyError(model_id)


@pytest.fixture(scope="session")
def catalog_shape() -> Callable[[str], ModelShape]:
    return _build


@pytest.fixture(scope="session")
def sizing_file() -> dict:
    return json.loads(CASES_FILE.read_text())


@dataclass(frozen=True)
class SizingCase:
    """One case of a release's sizing file, with the file's model facts."""

    release: Release
    case: dict
    model: dict


def _sizing_cases() -> list[SizingCase]:
    cases = []
    for version, path in CASES_FILES.items():
        document = json.loads(path.read_text())
        cases.extend(SizingCase(release_named(version), case, document["models"][case["model"]])
                     for case in document["cases"])
    return cases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "sizing_case" in metafunc.fixturenames:
        cases = _sizing_cases()
        counters: dict[str, int] = {}
        ids = []
        for golden in cases:
            index = counters[golden.release.version] = counters.get(golden.release.version, -1) + 1
            args = golden.case["args"]
            ids.append(f"{golden.release.version}-{index}-{golden.case['model'].split('/')[1]}-"
                       f"tp{args['tensor_parallel_size']}-{args['kv_cache_dtype']}")
        metafunc.parametrize("sizing_case", cases, ids=ids)
