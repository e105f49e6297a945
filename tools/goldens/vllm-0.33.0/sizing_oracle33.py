#!/usr/bin/env python3
"""KV-cache sizing oracle: what vLLM 0.33.0 itself computes, per model config.

Port of ../vllm-0.17.1/sizing_oracle.py to vLLM 0.33.0 (run with VENV/bin/python, the 0.33.0 environment).
0.33.0 API: planning in vllm.v1.core.kv_cache_planning, get_global_kv_cache_groups, one backing
allocation per worker, kv_cache_layout resolved first, and the merged
"GPU KV cache size: N tokens, Maximum concurrency for M tokens per request: Cx" line logged by
kv_cache_utils.update_kv_cache_capacity on the scheduler KV config.

    VENV/bin/python sizing_oracle33.py                 # all models -> sizing-oracle-0.33.0.json
    VENV/bin/python sizing_oracle33.py -o out.json --models Qwen--Qwen2-0.5B-Instruct
    VENV/bin/python sizing_oracle33.py --sanity             # only the Qwen2-0.5B check (exit 1 on mismatch)

For every ``kvplan/data/models/<org>--<name>/config.json`` and every case of a
small grid (block_size 16; kv_cache_dtype auto/fp8; TP 1/2/4 where vLLM accepts
it; max_model_len = max_position_embeddings and 8192; max_num_batched_tokens
8192; max_num_seqs 256; KV memory 20 GiB and 70 GiB per GPU) it:

1. builds the real ``VllmConfig`` with vLLM's own ``EngineArgs.create_engine_config()``
   (real HF-config parsing, dtype resolution, CacheConfig.sliding_window rule,
   model-specific ``verify_and_update_config`` hooks incl. the hybrid
   attention/Mamba block-size and Mamba-page padding). The platform is an
   *emulated* CUDA platform (vLLM's ``CudaPlatformBase`` with device queries
   answered as an H100: capability 9.0, 80 GiB) because this machine has no GPU;
2. builds the per-layer KV cache specs the way the model file of the
   architecture does (``Attention.get_kv_cache_spec`` / ``MLAAttention`` /
   ``MambaBase``), using vLLM's spec classes and vLLM helpers
   (``ModelConfig.get_num_kv_heads``, ``kv_cache_dtype_str_to_dtype``,
   ``<ModelCls>.get_mamba_state_shape_from_config`` ...). The real model classes
   are NOT instantiated (they need CUDA kernels / a process group); which rule
   was used is recorded per model in ``models[<id>].spec_source``;
3. calls vLLM's own ``get_kv_cache_configs`` (the engine-core entry point; one
   spec dict and one memory figure per TP rank) and records the result; when
   the memory check raises, it records the error and vLLM's own estimate
   (``_estimate_max_model_len_from_groups``, the one the error message uses).

Nothing from vLLM is copied here: everything numeric comes from vLLM imports.
"""

from __future__ import annotations

import argparse
import copy
import glob
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))  # the repository
CONFIG_DIR = os.path.join(ROOT, "kvplan", "data", "models")
DEFAULT_OUT = os.path.join(HERE, "sizing-oracle-0.33.0.json")
GIB = 1 << 30
SANITY_BYTES = 25_938_100_224  # Qwen2-0.5B: 131928 blocks (the seed example)

import torch  # noqa: E402
import vllm  # noqa: E402
import vllm.platforms as _platforms  # noqa: E402

# --- 1. import the model-layer modules while the (CPU) UnspecifiedPlatform is
# current: with a CUDA platform their import pulls in vllm_flash_attn (absent).
_ORIG_PLATFORM = _platforms.current_platform
import vllm.model_executor.model_loader  # noqa: E402,F401
import vllm.model_executor.layers.attention  # noqa: E402,F401

MODEL_MODULES = ["llama", "qwen2", "qwen3", "qwen3_moe", "mixtral", "mistral", "phi3",
                 "gemma2", "gemma3", "gemma3_mm", "gpt_oss", "deepseek_v2",
                 "qwen3_next", "nemotron_h", "qwen3_5"]
MODULE_IMPORT_ERRORS: dict[str, str] = {}
for _m in MODEL_MODULES:
    try:
        __import__(f"vllm.model_executor.models.{_m}")
    except Exception as e:  # noqa: BLE001
        MODULE_IMPORT_ERRORS[_m] = f"{type(e).__name__}: {e}"

# --- 2. emulated CUDA platform (vllm/platforms/cuda.py imports vllm._C at
# module level; the CUDA build of that extension cannot load here).
sys.modules.setdefault("vllm._C", types.ModuleType("vllm._C"))
sys.modules.setdefault("vllm._C_stable_libtorch", types.ModuleType("vllm._C_stable_libtorch"))  # 0.33.0 cuda.py
from vllm.platforms.cuda import CudaPlatformBase  # noqa: E402
from vllm.platforms.interface import DeviceCapability  # noqa: E402

EMULATED_GPU = {"name": "NVIDIA H100 80GB HBM3", "capability": [9, 0], "total_memory": 80 * GIB}


class EmulatedCudaPlatform(CudaPlatformBase):
    @classmethod
    def get_device_capability(cls, device_id: int = 0):
        return DeviceCapability(*EMULATED_GPU["capability"])

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return EMULATED_GPU["name"]

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return EMULATED_GPU["total_memory"]

    @classmethod
    def is_fully_connected(cls, physical_device_ids) -> bool:
        return True

    @classmethod
    def device_count(cls) -> int:
        return 8


_EMU = EmulatedCudaPlatform()
_platforms.current_platform = _EMU
_platforms._current_platform = _EMU  # 0.33.0 lazy platform holder
# 0.33.0: the fp8 / mxfp4 quant-config paths ask the CUDA extension whether CUTLASS fp8 kernels
# exist; answer as the emulated H100 (capability 90) would: yes for both.
import vllm._custom_ops as _ops  # noqa: E402
_ops.cutlass_scaled_mm_supports_fp8 = lambda cap: cap >= 89
_ops.cutlass_scaled_mm_supports_block_fp8 = lambda cap: cap >= 90
for _mod in list(sys.modules.values()):  # rebind `from vllm.platforms import current_platform`
    try:
        if getattr(_mod, "current_platform", None) is _ORIG_PLATFORM:
            _mod.current_platform = _EMU
    except Exception:  # noqa: BLE001
        pass

from vllm.engine.arg_utils import EngineArgs  # noqa: E402
from vllm.logger import _print_info_once  # noqa: E402
from vllm.model_executor.models.registry import ModelRegistry  # noqa: E402
from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype  # noqa: E402
from vllm.v1.core import kv_cache_utils as ku  # noqa: E402
from vllm.v1.core import kv_cache_planning as kp  # noqa: E402
from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder  # noqa: E402
from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec, MambaSpec, MLAAttentionSpec, SlidingWindowSpec,
    UniformTypeKVCacheSpecs, get_kv_quant_mode,
)


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


# ---------------------------------------------------------------------------
# Per-architecture layer specs (what each vLLM 0.17.1 model file constructs).
# ---------------------------------------------------------------------------

def _dtype_name(dt) -> str:
    return str(dt).replace("torch.", "")


def _attn_spec(vc, num_kv_heads: int, head_size: int, sliding_window):
    """Attention.get_kv_cache_spec (model_executor/layers/attention/attention.py):
    sliding = per_layer_sliding_window, else cache_config.sliding_window."""
    cc = vc.cache_config
    dtype = kv_cache_dtype_str_to_dtype(cc.cache_dtype, vc.model_config)
    qm = get_kv_quant_mode(cc.cache_dtype)
    if sliding_window is not None:
        # 0.33.0: block = largest kernel block within one full page of block_size tokens
        # (= cache block_size for FlashAttention on Hopper, which supports 16); no shared page.
        return SlidingWindowSpec(block_size=cc.block_size, num_kv_heads=num_kv_heads,
                                 head_size=head_size, head_size_v=head_size, dtype=dtype,
                                 kv_quant_mode=qm, sliding_window=sliding_window,
                                 page_size_padded=cc.skip_page_size_padded)
    return FullAttentionSpec(block_size=cc.block_size, num_kv_heads=num_kv_heads,
                             head_size=head_size, head_size_v=head_size, dtype=dtype, kv_quant_mode=qm)


def _tp_kv_heads(total: int, tp: int) -> int:
    # LlamaAttention/Qwen2Attention/...: asserts divisibility either way, then
    # max(1, total // tp). Same value as ModelConfig.get_num_kv_heads.
    if total >= tp:
        assert total % tp == 0, f"{total} kv heads not divisible by tp {tp}"
    else:
        assert tp % total == 0, f"tp {tp} not a multiple of {total} kv heads"
    return max(1, total // tp)


def _mamba_spec(vc, arch: str, mamba_type: str):
    """MambaBase.get_kv_cache_spec (layers/mamba/abstract.py) with the shapes /
    dtypes from the model class' own get_mamba_state_*_from_config."""
    cls, _ = ModelRegistry.resolve_model_cls(arch, model_config=vc.model_config)
    cc = vc.cache_config
    return MambaSpec(
        shapes=tuple(cls.get_mamba_state_shape_from_config(vc)),
        dtypes=cls.get_mamba_state_dtype_from_config(vc),
        block_size=cc.mamba_block_size,
        page_size_padded=cc.mamba_page_size_padded,
        mamba_type=mamba_type,
        mamba_cache_mode=cc.mamba_cache_mode,
        num_speculative_blocks=(0 if cc.use_replayssm else vc.num_speculative_tokens),
    )


def build_specs(vc) -> tuple[dict, str]:
    mc = vc.model_config
    arch = mc.architecture
    hf = mc.hf_text_config
    tp = vc.parallel_config.tensor_parallel_size
    L = hf.num_hidden_layers
    model_sw = vc.cache_config.sliding_window  # None for interleaved models
    specs: dict = {}

    if arch in ("LlamaForCausalLM", "MistralForCausalLM", "Phi3ForCausalLM"):
        # llama.py LlamaAttention (mistral.py / phi3.py subclass it)
        head = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
        kvh = _tp_kv_heads(hf.num_key_value_heads, tp)
        layer_types = getattr(hf, "layer_types", None)
        for i in range(L):
            sw = None
            if layer_types and layer_types[i] == "sliding_attention":
                sw = hf.sliding_window
            specs[f"model.layers.{i}.self_attn.attn"] = _attn_spec(vc, kvh, head, sw if sw is not None else model_sw)
        return specs, ("by hand from llama.py LlamaAttention: head_dim = config.head_dim or hidden/heads; "
                       "kv heads max(1, total//tp); sliding window from layer_types if present else "
                       "CacheConfig.sliding_window (= config.sliding_window unless interleaved)")
    if arch == "Qwen2ForCausalLM":
        head = hf.hidden_size // hf.num_attention_heads
        kvh = _tp_kv_heads(hf.num_key_value_heads, tp)
        for i in range(L):
            specs[f"model.layers.{i}.self_attn.attn"] = _attn_spec(vc, kvh, head, model_sw)
        return specs, ("by hand from qwen2.py Qwen2Attention: head_dim = hidden/heads (config head_dim ignored); "
                       "no per-layer window, CacheConfig.sliding_window (None: transformers drops sliding_window "
                       "when use_sliding_window is false)")
    if arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM"):
        head = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
        kvh = _tp_kv_heads(hf.num_key_value_heads, tp)
        for i in range(L):
            specs[f"model.layers.{i}.self_attn.attn"] = _attn_spec(vc, kvh, head, model_sw)
        f = {"Qwen3ForCausalLM": "qwen3.py Qwen3Attention", "Qwen3MoeForCausalLM": "qwen3_moe.py Qwen3MoeAttention",
             "MixtralForCausalLM": "mixtral.py MixtralAttention"}[arch]
        return specs, (f"by hand from {f}: head_dim = config.head_dim or hidden/heads; kv heads max(1, total//tp); "
                       "no per-layer window, CacheConfig.sliding_window")
    if arch in ("Gemma2ForCausalLM", "Gemma3ForConditionalGeneration", "Gemma3ForCausalLM"):
        head = hf.head_dim
        kvh = _tp_kv_heads(hf.num_key_value_heads, tp)
        for i in range(L):
            sw = hf.sliding_window if hf.layer_types[i] == "sliding_attention" else None
            prefix = "language_model.model" if arch == "Gemma3ForConditionalGeneration" else "model"
            specs[f"{prefix}.layers.{i}.self_attn.attn"] = _attn_spec(vc, kvh, head, sw if sw is not None else model_sw)
        f = "gemma2.py Gemma2Attention" if arch == "Gemma2ForCausalLM" else "gemma3.py Gemma3Attention (via gemma3_mm.py)"
        return specs, (f"by hand from {f}: head_dim = config.head_dim; sliding window per config.layer_types "
                       "(as completed by transformers' config class)")
    if arch == "GptOssForCausalLM":
        head = hf.head_dim
        kvh = hf.num_key_value_heads // tp
        for i in range(L):
            sw = hf.sliding_window if i % 2 == 0 else None
            specs[f"model.layers.{i}.attn.attn"] = _attn_spec(vc, kvh, head, sw if sw is not None else model_sw)
        return specs, ("by hand from gpt_oss.py OAIAttention: sliding_window on layer_idx % 2 == 0 (not read from "
                       "layer_types), kv heads total//tp, head_dim = config.head_dim; sinks do not change the spec")
    if arch in ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"):
        assert mc.use_mla
        cc = vc.cache_config
        dtype = kv_cache_dtype_str_to_dtype(cc.cache_dtype, mc)
        for i in range(L):
            specs[f"model.layers.{i}.self_attn.mla_attn.mla_attn"] = MLAAttentionSpec(
                block_size=cc.block_size, num_kv_heads=1, max_tp_shards=1,
                head_size=hf.kv_lora_rank + hf.qk_rope_head_dim, dtype=dtype,
                cache_dtype_str=cc.cache_dtype, kv_quant_mode=get_kv_quant_mode(cc.cache_dtype),
                state_content_bytes={"fp8_ds_mla": 656, "nvfp4_ds_mla": 352}.get(cc.cache_dtype))
        return specs, ("by hand from deepseek_v2.py DeepseekV2MLAAttention -> MLAAttention.get_kv_cache_spec: "
                       "MLAAttentionSpec(num_kv_heads=1, head_size=kv_lora_rank+qk_rope_head_dim) on every layer, "
                       "replicated (not split) under TP; MTP layers not loaded without speculative decoding")
    if arch == "Qwen3NextForCausalLM":
        head = hf.head_dim or (hf.hidden_size // (hf.num_attention_heads // tp))
        kvh = _tp_kv_heads(hf.num_key_value_heads, tp)
        for i in range(L):
            if hf.layer_types[i] == "linear_attention":
                specs[f"model.layers.{i}.linear_attn"] = _mamba_spec(vc, arch, "gdn_attention")
            else:
                specs[f"model.layers.{i}.self_attn.attn"] = _attn_spec(vc, kvh, head, model_sw)
        return specs, ("by hand from qwen3_next.py: layer_types (vLLM's Qwen3NextConfig, from full_attention_interval); "
                       "linear_attention -> MambaSpec(gdn_attention) with Qwen3NextForCausalLM."
                       "get_mamba_state_shape/dtype_from_config; full_attention -> Qwen3NextAttention FullAttentionSpec")
    if arch == "NemotronHForCausalLM":
        head = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
        kvh = _tp_kv_heads(hf.num_key_value_heads, tp)
        for i, ch in enumerate(hf.hybrid_override_pattern):
            if ch == "M":
                specs[f"model.layers.{i}.mixer"] = _mamba_spec(vc, arch, "mamba2")
            elif ch == "*":
                specs[f"model.layers.{i}.mixer.attn"] = _attn_spec(vc, kvh, head, model_sw)
        return specs, ("by hand from nemotron_h.py: hybrid_override_pattern M -> MambaMixer2 MambaSpec(mamba2) with "
                       "NemotronHForCausalLM.get_mamba_state_shape/dtype_from_config; * -> NemotronHAttention "
                       "FullAttentionSpec; - / E layers hold no KV cache")
    raise NotImplementedError(f"no spec builder for {arch}")


# ---------------------------------------------------------------------------

def make_vllm_config(model_dir: str, tp: int, kv_dtype: str, max_model_len: int, block_size: int,
                     mnbt: int, mns: int, kv_mem: int, trust_remote_code: bool):
    ea = EngineArgs(model=model_dir, skip_tokenizer_init=True, load_format="dummy",
                    trust_remote_code=trust_remote_code, block_size=block_size,
                    kv_cache_dtype=kv_dtype, tensor_parallel_size=tp, max_model_len=max_model_len,
                    max_num_batched_tokens=mnbt, max_num_seqs=mns, kv_cache_memory_bytes=kv_mem,
                    # explicit, so ParallelConfig does not count the (absent) local GPUs;
                    # the executor backend plays no part in KV sizing
                    distributed_executor_backend="mp" if tp > 1 else None)
    vc = ea.create_engine_config()
    # 0.33.0: the executor (uniproc_executor / multiproc_executor) calls
    # current_platform.update_block_size_for_backend(vllm_config) before the workers build
    # their layers: backend block-size check and, for hybrids, _align_hybrid_block_size
    # (attention block size / Mamba page padding).  Reproduce it on the emulated platform.
    # No layers are instantiated here, so the platform finds no attention backend and the
    # hook would be a no-op.  For hybrid models call its alignment step directly with a stand-in
    # for the FlashAttention backend vLLM picks on Hopper (kernel block sizes MultipleOf(16),
    # customize_spec = identity; the real class cannot be imported without vllm_flash_attn).
    # Caveat: Mamba prefill-checkpoint alignment is taken from the (absent) layers -> 1.
    if vc.model_config.is_hybrid:
        from vllm.config.vllm import set_current_vllm_config
        with set_current_vllm_config(vc):
            _EMU._align_hybrid_block_size(vc, _FAStandIn)
    return vc


class _FAStandIn:
    """FlashAttention backend facts used by Platform._align_hybrid_block_size (0.33.0)."""

    @classmethod
    def get_supported_kernel_block_sizes(cls, kv_cache_spec=None):
        from vllm.v1.attention.backend import MultipleOf
        return [MultipleOf(16)]

    @classmethod
    def customize_spec(cls, spec):
        return spec

    @staticmethod
    def get_name():
        return "FLASH_ATTN(stand-in)"


def spec_summary(name, spec):
    d = {"type": type(spec).__name__, "block_size": spec.block_size,
         "page_size_bytes": spec.page_size_bytes}
    if isinstance(spec, UniformTypeKVCacheSpecs):
        d["member_page_sizes"] = sorted({s.page_size_bytes for s in spec.kv_cache_specs.values()})
        return d
    for k in ("num_kv_heads", "head_size", "sliding_window", "attention_chunk_size",
              "cache_dtype_str", "mamba_type", "mamba_cache_mode", "page_size_padded"):
        v = getattr(spec, k, None)
        if v is not None:
            d[k] = v
    if hasattr(spec, "dtype"):
        d["dtype"] = _dtype_name(spec.dtype)
    if isinstance(spec, MambaSpec):
        d["shapes"] = [list(s) for s in spec.shapes]
        d["dtypes"] = [_dtype_name(x) for x in spec.dtypes]
    return d


def run_case(vc, specs: dict, avail: int) -> dict:
    """0.33.0 engine-core path: register specs, resolve layout, get_global_kv_cache_groups,
    get_kv_cache_configs (one spec dict + one memory figure per TP rank), then
    generate_scheduler_kv_cache_config + update_kv_cache_capacity (the merged log line)."""
    tp = vc.parallel_config.tensor_parallel_size
    per_rank_specs = [copy.deepcopy(specs) for _ in range(tp)]
    layer_specs = {}
    for n, s in specs.items():
        key = json.dumps(spec_summary(n, s), sort_keys=True)
        layer_specs.setdefault(key, []).append(n)
    out: dict = {
        "layer_specs": [dict(json.loads(k), num_layers=len(v)) for k, v in layer_specs.items()],
        "num_kv_cache_layers": len(specs),
    }
    if vc.cache_config.kv_cache_layout is None:
        vc.cache_config.kv_cache_layout = "LBNHC"  # EngineCore: resolve_kv_cache_layout (default preference)
    register_all_kvcache_specs(vc)
    builder = get_kv_cache_config_builder(vc)
    groups = kp.get_global_kv_cache_groups(vc, [copy.deepcopy(specs) for _ in range(tp)])
    out["num_groups"] = len(groups)
    out["groups"] = [dict(spec_summary("", g.kv_cache_spec), num_layers=len(g.layer_names))
                     for g in groups]
    out["bytes_needed_for_one_max_len_request"] = kp._max_memory_usage_bytes_from_groups(builder, vc, groups)
    out["pool_bytes_per_block"] = kp._pool_bytes_per_block_from_builder(builder, vc, groups)
    out["kv_cache_layout"] = vc.cache_config.kv_cache_layout

    cap = _Capture()
    lgs = [logging.getLogger("vllm.v1.core.kv_cache_utils"), logging.getLogger("vllm.v1.core.kv_cache_planning")]
    for lg in lgs:
        lg.addHandler(cap)
    _print_info_once.cache_clear()
    try:
        try:
            cfgs = kp.get_kv_cache_configs(vc, per_rank_specs, [avail] * tp, groups)
        except ValueError as e:
            msg = str(e)
            out["ok"] = False
            out["stage"] = "memory_check"
            out["error_type"] = type(e).__name__
            out["error"] = msg
            # the check (and the estimate in the message) uses avail - one block (null block)
            chk = avail - out["pool_bytes_per_block"]
            out["check_memory_bytes"] = chk
            out["estimated_max_model_len"] = kp._estimate_max_model_len_from_groups(builder, vc, groups, chk)
            m = re.search(r"estimated maximum model length is (\d+)", msg)
            out["estimated_max_model_len_in_message"] = int(m.group(1)) if m else None
            try:
                out["estimate_max_model_len_per_layer_sum"] = kp.estimate_max_model_len(
                    vc, copy.deepcopy(specs), avail)
            except Exception as e2:  # noqa: BLE001
                out["estimate_max_model_len_per_layer_sum"] = f"{type(e2).__name__}: {e2}"[:200]
            return out
        cfg = cfgs[0]
        assert all(c.num_blocks == cfg.num_blocks for c in cfgs)
        skc = ku.generate_scheduler_kv_cache_config(cfgs)
        ku.update_kv_cache_capacity(vc, skc)
    finally:
        for lg in lgs:
            lg.removeHandler(cap)
    out["ok"] = True
    out["num_blocks"] = cfg.num_blocks
    out["page_size_bytes"] = sorted({g.kv_cache_spec.page_size_bytes for g in cfg.kv_cache_groups})
    out["kv_cache_tensors"] = [t.size for t in cfg.kv_cache_tensors]
    out["kv_cache_tensor_shared_by"] = [len(t.layers) for t in cfg.kv_cache_tensors]
    # 0.33.0: every KVCacheTensor views ONE backing allocation of bytes_per_block * num_blocks
    out["kv_cache_tensors_total_bytes"] = max([t.size for t in cfg.kv_cache_tensors] or [0])
    out["kv_cache_tensor_layout"] = [{"layers": len(t.layers), "layer_stride": t.layer_stride,
                                      "block_stride": t.block_stride, "offset": t.offset}
                                     for t in cfg.kv_cache_tensors]
    out["groups"] = [dict(spec_summary("", g.kv_cache_spec), num_layers=len(g.layer_names))
                     for g in cfg.kv_cache_groups]
    tok, conc = ku.get_kv_cache_capacity(vc, skc)
    out["max_concurrency"] = conc
    out["vllm_log"] = cap.lines
    out["gpu_kv_cache_tokens"] = None
    for line in cap.lines:
        m = re.match(r"(\S+(?: \+ host)?) KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) "
                     r"tokens per request: ([\d.]+)x", line)
        if m:
            out["gpu_kv_cache_tokens"] = int(m.group(2).replace(",", ""))
            out["log_max_concurrency_2dp"] = float(m.group(4))
            out["log_device"] = m.group(1)
    if out["gpu_kv_cache_tokens"] is None:
        out["gpu_kv_cache_tokens"] = tok
        out["gpu_kv_cache_tokens_from"] = "get_kv_cache_capacity (log line not captured)"
    out["kv_cache_size_tokens"] = vc.cache_config.kv_cache_size_tokens
    out["needs_kv_cache_zeroing"] = bool(getattr(cfg, "needs_kv_cache_zeroing", False))
    return out


def remarks(arch: str, raw: dict, vc) -> list[str]:
    """Plain-language notes on what vLLM does with this config (for the reader)."""
    r = []
    cc, mc = vc.cache_config, vc.model_config
    hf = mc.hf_text_config
    if cc.sliding_window is not None:
        r.append(f"config sliding_window={cc.sliding_window} and no layer_types: vLLM puts it in "
                 "CacheConfig.sliding_window, so EVERY attention layer gets SlidingWindowSpec(%d)" % cc.sliding_window)
    if raw.get("sliding_window") is not None and getattr(hf, "sliding_window", None) is None:
        r.append(f"config.json sliding_window={raw['sliding_window']} is ignored (use_sliding_window="
                 f"{raw.get('use_sliding_window')}): transformers' config class drops it, all layers full attention")
    if arch == "GptOssForCausalLM":
        r.append("no torch_dtype in config.json: vLLM reads the safetensors dtypes from the hub (BF16 + U8 -> bf16); "
                 "offline it falls back to float32 and downcasts to the platform's first dtype (bf16 on "
                 "capability >= 8.0). KV cache is bf16 either way; mxfp4 quantization does not touch the KV cache")
        r.append("sliding window on even layer indices (gpt_oss.py uses layer_idx % 2, not layer_types)")
    if mc.use_mla:
        r.append("MLA: on a real Hopper GPU vLLM 0.33.0 takes the selected backend's preferred block size "
                 "(FlashMLA 64; Blackwell CUTLASS-MLA 128 / FlashInfer-MLA 32); this oracle passes block_size 16 "
                 "explicitly and keeps it (as the 0.17.1 oracle did), so the numbers are the Triton-MLA / A100 path")
        if raw.get("num_nextn_predict_layers"):
            r.append("num_nextn_predict_layers (MTP) layers are not built without speculative decoding: no KV for them")
    if mc.is_hybrid:
        r.append(f"hybrid (0.33.0): enable_prefix_caching={cc.enable_prefix_caching}, mamba_cache_mode="
                 f"{cc.mamba_cache_mode} (0.33.0 has only 'align'/'none'), mamba_block_size={cc.mamba_block_size}, "
                 f"attention block_size={cc.block_size}, mamba_page_size_padded={cc.mamba_page_size_padded}")
    if arch == "NemotronHForCausalLM":
        head = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
        kvh = _tp_kv_heads(hf.num_key_value_heads, tp)
        for i, ch in enumerate(hf.hybrid_override_pattern):
            if ch == "M":
                specs[f"model.layers.{i}.mixer"] = _mamba_spec(vc, arch, "mamba2")
            elif ch == "*":
                specs[f"model.layers.{i}.mixer.attn"] = _attn_spec(vc, kvh, head, model_sw)
        return specs, ("by hand from nemotron_h.py: hybrid_override_pattern M -> MambaMixer2 MambaSpec(mamba2) with "
                       "NemotronHForCausalLM.get_mamba_state_shape/dtype_from_config; * -> NemotronHAttention "
                       "FullAttentionSpec; - / E layers hold no KV cache")
    raise NotImplementedError(f"no spec builder for {arch}")


# ---------------------------------------------------------------------------

def make_vllm_config(model_dir: str, tp: int, kv_dtype: str, max_model_len: int, block_size: int,
                     mnbt: int, mns: int, kv_mem: int, trust_remote_code: bool):
    ea = EngineArgs(model=model_dir, skip_tokenizer_init=True, load_format="dummy",
                    trust_remote_code=trust_remote_code, block_size=block_size,
                    kv_cache_dtype=kv_dtype, tensor_parallel_size=tp, max_model_len=max_model_len,
                    max_num_batched_tokens=mnbt, max_num_seqs=mns, kv_cache_memory_bytes=kv_mem,
                    # explicit, so ParallelConfig does not count the (absent) local GPUs;
                    # the executor backend plays no part in KV sizing
                    distributed_executor_backend="mp" if tp > 1 else None)
    vc = ea.create_engine_config()
    # 0.33.0: the executor (uniproc_executor / multiproc_executor) calls
    # current_platform.update_block_size_for_backend(vllm_config) before the workers build
    # their layers: backend block-size check and, for hybrids, _align_hybrid_block_size
    # (attention block size / Mamba page padding).  Reproduce it on the emulated platform.
    # No layers are instantiated here, so the platform finds no attention backend and the
    # hook would be a no-op.  For hybrid models call its alignment step directly with a stand-in
    # for the FlashAttention backend vLLM picks on Hopper (kernel block sizes MultipleOf(16),
    # customize_spec = identity; the real class cannot be imported without vllm_flash_attn).
    # Caveat: Mamba prefill-checkpoint alignment is taken from the (absent) layers -> 1.
    if vc.model_config.is_hybrid:
        from vllm.config.vllm import set_current_vllm_config
        with set_current_vllm_config(vc):
            _EMU._align_hybrid_block_size(vc, _FAStandIn)
    return vc


class _FAStandIn:
    """FlashAttention backend facts used by Platform._align_hybrid_block_size (0.33.0)."""

    @classmethod
    def get_supported_kernel_block_sizes(cls, kv_cache_spec=None):
        from vllm.v1.attention.backend import MultipleOf
        return [MultipleOf(16)]

    @classmethod
    def customize_spec(cls, spec):
        return spec

    @staticmethod
    def get_name():
        return "FLASH_ATTN(stand-in)"


def spec_summary(name, spec):
    d = {"type": type(spec).__name__, "block_size": spec.block_size,
         "page_size_bytes": spec.page_size_bytes}
    if isinstance(spec, UniformTypeKVCacheSpecs):
        d["member_page_sizes"] = sorted({s.page_size_bytes for s in spec.kv_cache_specs.values()})
        return d
    for k in ("num_kv_heads", "head_size", "sliding_window", "attention_chunk_size",
              "cache_dtype_str", "mamba_type", "mamba_cache_mode", "page_size_padded"):
        v = getattr(spec, k, None)
        if v is not None:
            d[k] = v
    if hasattr(spec, "dtype"):
        d["dtype"] = _dtype_name(spec.dtype)
    if isinstance(spec, MambaSpec):
        d["shapes"] = [list(s) for s in spec.shapes]
        d["dtypes"] = [_dtype_name(x) for x in spec.dtypes]
    return d


def run_case(vc, specs: dict, avail: int) -> dict:
    """0.33.0 engine-core path: register specs, resolve layout, get_global_kv_cache_groups,
    get_kv_cache_configs (one spec dict + one memory figure per TP rank), then
    generate_scheduler_kv_cache_config + update_kv_cache_capacity (the merged log line)."""
    tp = vc.parallel_config.tensor_parallel_size
    per_rank_specs = [copy.deepcopy(specs) for _ in range(tp)]
    layer_specs = {}
    for n, s in specs.items():
        key = json.dumps(spec_summary(n, s), sort_keys=True)
        layer_specs.setdefault(key, []).append(n)
    out: dict = {
        "layer_specs": [dict(json.loads(k), num_layers=len(v)) for k, v in layer_specs.items()],
        "num_kv_cache_layers": len(specs),
    }
    if vc.cache_config.kv_cache_layout is None:
        vc.cache_config.kv_cache_layout = "LBNHC"  # EngineCore: resolve_kv_cache_layout (default preference)
    register_all_kvcache_specs(vc)
    builder = get_kv_cache_config_builder(vc)
    groups = kp.get_global_kv_cache_groups(vc, [copy.deepcopy(specs) for _ in range(tp)])
    out["num_groups"] = len(groups)
    out["groups"] = [dict(spec_summary("", g.kv_cache_spec), num_layers=len(g.layer_names))
                     for g in groups]
    out["bytes_needed_for_one_max_len_request"] = kp._max_memory_usage_bytes_from_groups(builder, vc, groups)
    out["pool_bytes_per_block"] = kp._pool_bytes_per_block_from_builder(builder, vc, groups)
    out["kv_cache_layout"] = vc.cache_config.kv_cache_layout

    cap = _Capture()
    lgs = [logging.getLogger("vllm.v1.core.kv_cache_utils"), logging.getLogger("vllm.v1.core.kv_cache_planning")]
    for lg in lgs:
        lg.addHandler(cap)
    _print_info_once.cache_clear()
    try:
        try:
            cfgs = kp.get_kv_cache_configs(vc, per_rank_specs, [avail] * tp, groups)
        except ValueError as e:
            msg = str(e)
            out["ok"] = False
            out["stage"] = "memory_check"
            out["error_type"] = type(e).__name__
            out["error"] = msg
            # the check (and the estimate in the message) uses avail - one block (null block)
            chk = avail - out["pool_bytes_per_block"]
            out["check_memory_bytes"] = chk
            out["estimated_max_model_len"] = kp._estimate_max_model_len_from_groups(builder, vc, groups, chk)
            m = re.search(r"estimated maximum model length is (\d+)", msg)
            out["estimated_max_model_len_in_message"] = int(m.group(1)) if m else None
            try:
                out["estimate_max_model_len_per_layer_sum"] = kp.estimate_max_model_len(
                    vc, copy.deepcopy(specs), avail)
            except Exception as e2:  # noqa: BLE001
                out["estimate_max_model_len_per_layer_sum"] = f"{type(e2).__name__}: {e2}"[:200]
            return out
        cfg = cfgs[0]
        assert all(c.num_blocks == cfg.num_blocks for c in cfgs)
        skc = ku.generate_scheduler_kv_cache_config(cfgs)
        ku.update_kv_cache_capacity(vc, skc)
    finally:
        for lg in lgs:
            lg.removeHandler(cap)
    out["ok"] = True
    out["num_blocks"] = cfg.num_blocks
    out["page_size_bytes"] = sorted({g.kv_cache_spec.page_size_bytes for g in cfg.kv_cache_groups})
    out["kv_cache_tensors"] = [t.size for t in cfg.kv_cache_tensors]
    out["kv_cache_tensor_shared_by"] = [len(t.layers) for t in cfg.kv_cache_tensors]
    # 0.33.0: every KVCacheTensor views ONE backing allocation of bytes_per_block * num_blocks
    out["kv_cache_tensors_total_bytes"] = max([t.size for t in cfg.kv_cache_tensors] or [0])
    out["kv_cache_tensor_layout"] = [{"layers": len(t.layers), "layer_stride": t.layer_stride,
                                      "block_stride": t.block_stride, "offset": t.offset}
                                     for t in cfg.kv_cache_tensors]
    out["groups"] = [dict(spec_summary("", g.kv_cache_spec), num_layers=len(g.layer_names))
                     for g in cfg.kv_cache_groups]
    tok, conc = ku.get_kv_cache_capacity(vc, skc)
    out["max_concurrency"] = conc
    out["vllm_log"] = cap.lines
    out["gpu_kv_cache_tokens"] = None
    for line in cap.lines:
        m = re.match(r"(\S+(?: \+ host)?) KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) "
                     r"tokens per request: ([\d.]+)x", line)
        if m:
            out["gpu_kv_cache_tokens"] = int(m.group(2).replace(",", ""))
            out["log_max_concurrency_2dp"] = float(m.group(4))
            out["log_device"] = m.group(1)
    if out["gpu_kv_cache_tokens"] is None:
        out["gpu_kv_cache_tokens"] = tok
        out["gpu_kv_cache_tokens_from"] = "get_kv_cache_capacity (log line not captured)"
    out["kv_cache_size_tokens"] = vc.cache_config.kv_cache_size_tokens
    out["needs_kv_cache_zeroing"] = bool(getattr(cfg, "needs_kv_cache_zeroing", False))
    return out


def remarks(arch: str, raw: dict, vc) -> list[str]:
    """Plain-language notes on what vLLM does with this config (for the reader)."""
    r = []
    cc, mc = vc.cache_config, vc.model_config
    hf = mc.hf_text_config
    if cc.sliding_window is not None:
        r.append(f"config sliding_window={cc.sliding_window} and no layer_types: vLLM puts it in "
                 "CacheConfig.sliding_window, so EVERY attention layer gets SlidingWindowSpec(%d)" % cc.sliding_window)
    if raw.get("sliding_window") is not None and getattr(hf, "sliding_window", None) is None:
        r.append(f"config.json sliding_window={raw['sliding_window']} is ignored (use_sliding_window="
                 f"{raw.get('use_sliding_window')}): transformers' config class drops it, all layers full attention")
    if arch == "GptOssForCausalLM":
        r.append("no torch_dtype in config.json: vLLM reads the safetensors dtypes from the hub (BF16 + U8 -> bf16); "
                 "offline it falls back to float32 and downcasts to the platform's first dtype (bf16 on "
                 "capability >= 8.0). KV cache is bf16 either way; mxfp4 quantization does not touch the KV cache")
        r.append("sliding window on even layer indices (gpt_oss.py uses layer_idx % 2, not layer_types)")
    if mc.use_mla:
        r.append("MLA: on a real Hopper GPU vLLM 0.33.0 takes the selected backend's preferred block size "
                 "(FlashMLA 64; Blackwell CUTLASS-MLA 128 / FlashInfer-MLA 32); this oracle passes block_size 16 "
                 "explicitly and keeps it (as the 0.17.1 oracle did), so the numbers are the Triton-MLA / A100 path")
        if raw.get("num_nextn_predict_layers"):
            r.append("num_nextn_predict_layers (MTP) layers are not built without speculative decoding: no KV for them")
    if mc.is_hybrid:
        r.append("hybrid: prefix caching defaults OFF for hybrid models in 0.17.1 -> mamba_cache_mode 'none', "
                 "mamba block_size = max_model_len; the attention block_size is raised from 16 so one attention "
                 "page >= one Mamba state page, and the Mamba page is padded up to the attention page")
    if arch == "NemotronHForCausalLM":
        r.append("config.json's auto_map needs the hub repo's configuration_nemotron_h.py (not bundled); the oracle "
                 "loads vLLM's own port (vllm.transformers_utils.configs.nemotron_h.NemotronHConfig) through a "
                 "one-line shim; mamba_ssm_cache_dtype defaults to float16 for NemotronH (models/config.py)")
    if arch == "Gemma3ForConditionalGeneration":
        r.append("sparse upstream config: head counts/head_dim/sliding_window_pattern/max_position_embeddings are "
                 "transformers' Gemma3TextConfig defaults (8 heads, 4 kv heads, head_dim 256, pattern 6, 131072)")
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--out", default=DEFAULT_OUT)
    ap.add_argument("--models", nargs="*", help="config folder names (org--name)")
    ap.add_argument("--sanity", action="store_true")
    ap.add_argument("--mem-gib", nargs="*", type=int, default=[20, 70],
                    help="available KV memory per GPU, GiB (default 20 70)")
    a = ap.parse_args()

    for name in ("vllm", "vllm.config", "vllm.engine", "vllm.model_executor"):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("vllm.v1.core.kv_cache_utils").setLevel(logging.INFO)

    if a.sanity:
        return sanity()

    dirs = sorted(d for d in glob.glob(os.path.join(CONFIG_DIR, "*--*")) if os.path.isdir(d))
    if a.models:
        dirs = [d for d in dirs if os.path.basename(d) in a.models]
    cases, skipped, notes, made_tmp = [], [], {}, []
    for d in dirs:
        folder = os.path.basename(d)
        model = folder.replace("--", "/", 1)
        raw = json.load(open(os.path.join(d, "config.json")))
        arch = (raw.get("architectures") or ["?"])[0]
        tmp = tempfile.mkdtemp(prefix="oracle-")
        made_tmp.append(tmp)
        shutil.copy(os.path.join(d, "config.json"), tmp)
        trust = arch in ("NemotronHForCausalLM",)
        if trust:
            # The config's auto_map points at the hub repo's configuration_nemotron_h.py,
            # which is not bundled; vLLM ships its own port of that class. This shim
            # makes `--trust-remote-code` load vLLM's NemotronHConfig.
            with open(os.path.join(tmp, "configuration_nemotron_h.py"), "w") as f:
                f.write("from transformers.models.nemotron_h.configuration_nemotron_h import NemotronHConfig  # noqa: F401\n")
        # module import problems -> skip with the reason
        mod = {"Qwen3_5MoeForConditionalGeneration": "qwen3_5", "Qwen3_5ForConditionalGeneration": "qwen3_5"}.get(arch)
        if mod and mod in MODULE_IMPORT_ERRORS:
            skipped.append({"model": model, "architecture": arch,
                            "reason": f"vLLM's model module {mod}.py cannot be imported on this CPU host "
                                      f"({MODULE_IMPORT_ERRORS[mod][:160]}); the hybrid block-size hook needs the "
                                      "model class, so the Mamba/GDN spec cannot be built faithfully"})
            print(f"SKIP {model}: {skipped[-1]['reason']}", file=sys.stderr)
            continue
        try:
            base = make_vllm_config(tmp, 1, "auto", None, 16, 8192, 256, 20 * GIB, trust)
        except Exception as e:  # noqa: BLE001
            skipped.append({"model": model, "architecture": arch,
                            "reason": f"vLLM config construction failed: {type(e).__name__}: {str(e)[:300]}"})
            print(f"SKIP {model}: {skipped[-1]['reason']}", file=sys.stderr)
            continue
        hf = base.model_config.hf_text_config
        mpe = getattr(hf, "max_position_embeddings", None)
        notes[model] = {
            "architecture": arch,
            "vllm_model_dtype": _dtype_name(base.model_config.dtype),
            "config_torch_dtype": raw.get("torch_dtype", raw.get("text_config", {}).get("dtype")),
            "vllm_default_max_model_len": base.model_config.max_model_len,
            "max_position_embeddings": mpe,
            "config_sliding_window": getattr(hf, "sliding_window", None),
            "cache_config_sliding_window": base.cache_config.sliding_window,
            "layer_types": sorted(set(getattr(hf, "layer_types", None) or [])) or None,
            "head_size_model_config": base.model_config.get_head_size(),
            "use_mla": base.model_config.use_mla,
            "is_hybrid": base.model_config.is_hybrid,
            "remarks": remarks(arch, raw, base),
        }
        for mml in sorted({mpe, 8192}, reverse=True):
            for tp in (1, 2, 4):
                for kvd in ("auto", "fp8"):
                    try:
                        vc = make_vllm_config(tmp, tp, kvd, mml, 16, 8192, 256, 20 * GIB, trust)
                        vc.scheduler_config.disable_hybrid_kv_cache_manager = False
                        specs, how = build_specs(vc)
                    except Exception as e:  # noqa: BLE001
                        err = f"{type(e).__name__}: " + " ".join(
                            ln.strip() for ln in str(e).splitlines()
                            if ln.strip() and not ln.strip().startswith("For further information"))[:600]
                        if tp > 1 and ("divisible" in err or "not a multiple" in err):
                            # heads do not divide: not a case
                            notes[model].setdefault("excluded", []).append(
                                {"tensor_parallel_size": tp, "kv_cache_dtype": kvd, "max_model_len": mml, "why": err})
                            continue
                        # vLLM rejects the arguments themselves (e.g. max_model_len above the derived max)
                        for gib in a.mem_gib:
                            cases.append({"model": model, "args": {
                                "kv_cache_memory_bytes": gib * GIB, "block_size": 16, "kv_cache_dtype": kvd,
                                "tensor_parallel_size": tp, "max_model_len": mml,
                                "max_num_batched_tokens": 8192, "max_num_seqs": 256},
                                "expect": {"ok": False, "stage": "config", "error_type": type(e).__name__,
                                           "error": err}})
                        print(f"{model} tp={tp} kv={kvd} mml={mml}: CONFIG ERROR {err[:120]}", file=sys.stderr)
                        continue
                    mems = [gib * GIB for gib in a.mem_gib]
                    if model == "Qwen/Qwen2-0.5B-Instruct" and (tp, kvd, mml) == (1, "auto", 32768):
                        mems.append(SANITY_BYTES)  # the documented 131928-block case
                    for avail in mems:
                        gib = avail / GIB
                        res = run_case(vc, specs, avail)
                        cc = vc.cache_config
                        notes[model]["spec_source"] = how
                        res.update({
                            "async_scheduling": vc.scheduler_config.async_scheduling,
                            "use_v2_model_runner": bool(vc.use_v2_model_runner),
                            "max_in_flight_tokens": int(vc.max_in_flight_tokens),
                            "effective_block_size": cc.block_size,
                            "resolved_cache_dtype": cc.cache_dtype,
                            "kv_dtype": _dtype_name(kv_cache_dtype_str_to_dtype(cc.cache_dtype, vc.model_config)),
                            "model_dtype": _dtype_name(vc.model_config.dtype),
                            "max_model_len": vc.model_config.max_model_len,
                            "disable_hybrid_kv_cache_manager": vc.scheduler_config.disable_hybrid_kv_cache_manager,
                        })
                        if vc.model_config.is_hybrid:
                            res.update({"mamba_cache_mode": cc.mamba_cache_mode,
                                        "mamba_block_size": cc.mamba_block_size,
                                        "mamba_page_size_padded": cc.mamba_page_size_padded,
                                        "enable_prefix_caching": cc.enable_prefix_caching})
                        cases.append({"model": model, "args": {
                            "kv_cache_memory_bytes": avail, "block_size": 16, "kv_cache_dtype": kvd,
                            "tensor_parallel_size": tp, "max_model_len": mml,
                            "max_num_batched_tokens": 8192, "max_num_seqs": 256}, "expect": res})
                        print(f"{model} tp={tp} kv={kvd} mml={mml} mem={gib}GiB -> "
                              + (f"blocks={res['num_blocks']} groups={res['num_groups']} conc={res['max_concurrency']:.2f}"
                                 if res["ok"] else f"ERROR est={res['estimated_max_model_len']}"), file=sys.stderr)
    doc = {
        "vllm_version": vllm.__version__,
        "generator": "sizing_oracle33.py (vLLM 0.33.0 port of the 0.17.1 sizing oracle)",
        "platform": {"emulated_cuda_gpu": EMULATED_GPU, "torch": torch.__version__,
                     "note": "VllmConfig built by EngineArgs.create_engine_config() on an emulated CUDA platform "
                             "(vLLM's CudaPlatformBase, device queries answered as H100, capability 9.0); "
                             "disable_hybrid_kv_cache_manager resolves to False as on CUDA"},
        "units": {"kv_cache_memory_bytes": "per GPU (vLLM's --kv-cache-memory, per worker)",
                  "max_concurrency": "float, vLLM's get_max_concurrency_for_kv_cache_config (log rounds to 2 dp)"},
        "models": notes,
        "skipped": skipped,
        "cases": cases,
    }
    for t in made_tmp:
        shutil.rmtree(t, ignore_errors=True)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases ({len(notes)} models, {len(skipped)} skipped) to {a.out}", file=sys.stderr)


def sanity() -> int:
    d = os.path.join(CONFIG_DIR, "Qwen--Qwen2-0.5B-Instruct")
    tmp = tempfile.mkdtemp(prefix="oracle-")
    shutil.copy(os.path.join(d, "config.json"), tmp)
    try:
        vc = make_vllm_config(tmp, 1, "auto", 32768, 16, 8192, 256, 25_938_100_224, False)
        specs, _ = build_specs(vc)
        r = run_case(vc, specs, 25_938_100_224)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    got = (r["num_blocks"], r["page_size_bytes"], round(r["max_concurrency"], 2))
    want = (131928, [8192], 64.42)  # 0.17.1 values; 0.33.0 keeps num_blocks/page/concurrency for a dense model
    print("sanity", "OK" if got == want else "MISMATCH", got, r["vllm_log"])
    return 0 if got == want else 1


if __name__ == "__main__":
    sys.exit(main() or 0)
