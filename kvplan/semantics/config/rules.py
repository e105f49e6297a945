"""The configuration rules vLLM 0.17.1 applies before it sizes the cache: scheduler defaults and
checks, block sizes, pipeline split, tensor-parallel head counts, dtypes (semantics sections 1,
3.1 and 3.2). Pure functions; a configuration vLLM refuses raises `ConfigRejected` (exit 2)
carrying vLLM's own message where it has one.

Public API:
    batch_defaults(gpu_total_bytes, gpu_name, usage) -> (max_num_batched_tokens, max_num_seqs)
    resolve_batch_limits(max_model_len, max_num_batched_tokens=None, max_num_seqs=None, *,
                         gpu_total_bytes=None, gpu_name="", usage="openai_api_server",
                         enable_chunked_prefill=True, performance_mode="balanced") -> BatchLimits
    verify_batch_limits(max_num_batched_tokens, max_num_seqs, max_model_len,
                        enable_chunked_prefill=True) -> warnings
    verify_max_model_len(requested, derived, derived_key, model_max_length=None) -> int
    check_block_size(block_size) -> None
    pp_partition(num_hidden_layers, pp_size, layer_partition=None) -> (sizes, log line | None)
    get_pp_indices(num_hidden_layers, pp_rank, pp_size, layer_partition=None) -> (start, end)
    kv_heads_per_rank(total_kv_heads, tp, replicate=True) -> int
    verify_tensor_parallel(shape, tp) -> None
    mla_block_size(capability, block_size, *, sparse, qk_nope_head_dim, backend=None) -> BlockSizeChoice
    kernel_block_alignment(capability, head_size, use_mla, backend=None) -> int
    resolve_mamba_cache_mode(enable_prefix_caching, supports_mamba_prefix_caching, ...) -> MambaMode
    hybrid_block_size(attn_page_per_token, mamba_page, *, ...) -> HybridBlocks
    resolve_model_dtype(requested, config_dtype, model_type, capability=None, ...) -> DtypeChoice
    kv_cache_dtype(cache_dtype, model_dtype) -> str
    resolve_disable_hybrid_kv_cache_manager(requested, has_chunked_local_attention) -> bool

Capabilities are `(major, minor)` tuples; None means "no GPU given", which for dtypes is read
as kvplan's default reference GPU (H100, capability 9.0)."""

from __future__ import annotations

from dataclasses import dataclass
from math import lcm
from typing import Literal

from kvplan.errors import KvplanError
from kvplan.semantics.kv.specs import cdiv
from kvplan.semantics.models.shape import ModelShape

GiB = 1 << 30
ALLOWED_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
DEFAULT_BLOCK_SIZE = 16
Usage = Literal["openai_api_server", "llm_class"]


class ConfigRejected(KvplanError):
    """vLLM would refuse these arguments before sizing anything (exit code 2)."""


# --- scheduler ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchLimits:
    max_num_batched_tokens: int
    max_num_seqs: int


def batch_defaults(
    gpu_total_bytes: int | None, gpu_name: str = "", usage: Usage = "openai_api_server"
) -> tuple[int, int]:
    """vLLM's `get_batch_defaults` on CUDA: (max_num_batched_tokens, max_num_seqs).

    Large GPUs other than the A100 get bigger batches; an unknown GPU counts as a small one."""
    large = (gpu_total_bytes or 0) >= 70 * GiB and "a100" not in gpu_name.lower()
    if large:
        return (16384, 1024) if usage == "llm_class" else (8192, 1024)
    return (8192, 256) if usage == "llm_class" else (2048, 256)


def resolve_batch_limits(
    max_model_len: int,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    *,
    gpu_total_bytes: int | None = None,
    gpu_name: str = "",
    usage: Usage = "openai_api_server",
    enable_chunked_prefill: bool = True,
    performance_mode: Literal["balanced", "interactivity", "throughput"] = "balanced",
) -> BatchLimits:
    """The values `EngineArgs` settles on: the user's where given, else the defaults, adjusted."""
    default_tokens, default_seqs = batch_defaults(gpu_total_bytes, gpu_name, usage)
    tokens = default_tokens if max_num_batched_tokens is None else max_num_batched_tokens
    seqs = default_seqs if max_num_seqs is None else max_num_seqs
    if performance_mode == "throughput":
        tokens = tokens * 2 if max_num_batched_tokens is None else tokens
        seqs = seqs * 2 if max_num_seqs is None else seqs
    if max_num_batched_tokens is None:
        if not enable_chunked_prefill:
            tokens = max(max_model_len, tokens)
        tokens = min(seqs * max_model_len, tokens)
    if max_num_seqs is None:
        seqs = min(seqs, tokens)
    return BatchLimits(tokens, seqs)


def verify_batch_limits(
    max_num_batched_tokens: int, max_num_seqs: int, max_model_len: int, enable_chunked_prefill: bool = True
) -> tuple[str, ...]:
    """`SchedulerConfig.verify_max_model_len`: errors raise, the warning is returned."""
    if max_num_batched_tokens < max_model_len and not enable_chunked_prefill:
        raise ConfigRejected(
            f"max_num_batched_tokens ({max_num_batched_tokens}) is smaller than max_model_len "
            f"({max_model_len}). This effectively limits the maximum sequence length to "
            "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
            "max_num_batched_tokens or decrease max_model_len."
        )
    if max_num_batched_tokens < max_num_seqs:
        raise ConfigRejected(
            f"max_num_batched_tokens ({max_num_batched_tokens}) must be greater than or equal to "
            f"max_num_seqs ({max_num_seqs})."
        )
    if max_num_batched_tokens > max_num_seqs * max_model_len:
        return (
            f"max_num_batched_tokens ({max_num_batched_tokens}) exceeds max_num_seqs * max_model_len "
            f"({max_num_seqs * max_model_len}). This may lead to unexpected behavior.",
        )
    return ()


_LONG_LEN_CAUTION = (
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative position "
    "encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If the model uses absolute "
    "position encoding, positions exceeding derived_max_model_len will cause a CUDA array out-of-bounds error."
)


def _too_long(requested: int, derived: float, derived_key: str, model_max_length: int | None) -> str:
    return (
        f"User-specified max_model_len ({requested}) is greater than the derived max_model_len "
        f"({derived_key}={derived} or model_max_length={model_max_length} in model's config.json)."
    )


def long_max_model_len_warning(
    requested: int, derived: float, derived_key: str, model_max_length: int | None = None
) -> str:
    """vLLM's warning when VLLM_ALLOW_LONG_MAX_MODEL_LEN lets a longer max_model_len through."""
    return f"{_too_long(requested, derived, derived_key, model_max_length)} {_LONG_LEN_CAUTION}"


def verify_max_model_len(
    requested: int | None, derived: float, derived_key: str, model_max_length: int | None = None,
    allow_long: bool = False,
) -> int:
    """`_get_and_verify_max_len`: None or -1 (auto-fit) take the derived length; a longer request
    is refused unless `allow_long` (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1). `derived` is the value as vLLM
    holds it (a float once RoPE scaling applied)."""
    if requested is None or requested == -1:
        return int(derived)
    too_long = requested > derived and (model_max_length is None or requested > model_max_length)
    if too_long and not allow_long:
        raise ConfigRejected(
            f"{_too_long(requested, derived, derived_key, model_max_length)} To allow overriding this maximum, "
            f"set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. {_LONG_LEN_CAUTION}"
        )
    return requested


# --- block size ---------------------------------------------------------------------------


def check_block_size(block_size: int) -> None:
    """`--block-size` must be one of vLLM's literal values (a derived hybrid block is exempt)."""
    if block_size not in ALLOWED_BLOCK_SIZES:
        allowed = ", ".join(str(size) for size in ALLOWED_BLOCK_SIZES)
        raise ConfigRejected(f"--block-size {block_size} is not allowed: vLLM accepts {allowed}")


@dataclass(frozen=True)
class BlockSizeChoice:
    block_size: int
    backend: str | None   # the MLA backend whose constraint was checked, None when none applies
    forced: bool          # True when the backend replaced the requested size
    log: str | None = None


_BACKEND_LOG_NAME = {
    "FLASHMLA": "FlashMLA", "CUTLASS_MLA": "CUTLASS_MLA", "FLASHINFER_MLA": "FlashInferMLA",
    "FLASHMLA_SPARSE": "FlashMLASparse", "FLASHINFER_MLA_SPARSE": "FlashMLASparse",
}


def _default_mla_backend(
    capability: tuple[int, int] | None, sparse: bool, qk_nope_head_dim: int
) -> str | None:
    if capability is None:
        return None
    if capability[0] == 10 and not sparse:
        return "FLASHINFER_MLA" if qk_nope_head_dim == 128 else "CUTLASS_MLA"
    return "FLASHMLA"


def _mla_backend_size(backend: str | None, block_size: int, capability: tuple[int, int] | None) -> int:
    if backend == "FLASHMLA" and capability is not None and capability[0] == 9 and block_size % 64:
        return 64  # dense FlashMLA kernels exist for Hopper only
    if backend == "CUTLASS_MLA" and block_size % 128:
        return 128
    if backend == "FLASHINFER_MLA" and block_size != 32 and block_size % 64:
        return 64
    return block_size


def mla_block_size(
    capability: tuple[int, int] | None,
    block_size: int | None,
    *,
    sparse: bool,
    qk_nope_head_dim: int,
    backend: str | None = None,
) -> BlockSizeChoice:
    """`CudaPlatform.check_and_update_config` for MLA models: a backend replaces the block size
    only when the requested one (16 when unset) does not suit it. Sparse MLA needs 64 anywhere."""
    requested = DEFAULT_BLOCK_SIZE if block_size is None else block_size
    chosen = backend or _default_mla_backend(capability, sparse, qk_nope_head_dim)
    size = _mla_backend_size(chosen, requested, capability)
    if sparse:
        chosen = backend if backend == "FLASHINFER_MLA_SPARSE" else "FLASHMLA_SPARSE"
        keeps = (32, 64) if chosen == "FLASHINFER_MLA_SPARSE" else (64,)
        size = size if size in keeps else 64
    if size == requested:
        return BlockSizeChoice(requested, chosen, forced=False)
    log = f"Forcing kv cache block size to {size} for {_BACKEND_LOG_NAME[chosen or '']} backend."
    return BlockSizeChoice(size, chosen, forced=True, log=log)


def kernel_block_alignment(
    capability: tuple[int, int] | None, head_size: int, use_mla: bool, backend: str | None = None
) -> int:
    """The multiple the hybrid hook rounds the attention block to."""
    if use_mla:
        return 128 if backend == "CUTLASS_MLA" else 64
    # FlashInfer on Blackwell has no kernel for head size 256 with 16-token blocks
    blackwell = capability is not None and capability[0] == 10
    if blackwell and head_size == 256 and backend in (None, "FLASHINFER"):
        return 32
    return 16


# --- Mamba hybrids ------------------------------------------------------------------------

# Models whose vLLM class implements SupportsMambaPrefixCaching (mode "all"); others use "align".
MAMBA_PREFIX_CACHING_ARCHITECTURES = frozenset({"NemotronHForCausalLM"})


@dataclass(frozen=True)
class MambaMode:
    mode: Literal["none", "align", "all"]
    logs: tuple[str, ...] = ()


def resolve_mamba_cache_mode(
    enable_prefix_caching: bool,
    supports_mamba_prefix_caching: bool,
    requested: Literal["none", "align", "all"] = "none",
    enable_chunked_prefill: bool = True,
) -> MambaMode:
    """`MambaModelConfig.verify_and_update_config`: caching off means one state block per request."""
    if not enable_prefix_caching:
        if requested != "none":
            return MambaMode("none", ("Mamba cache mode is set to 'none' when prefix caching is disabled",))
        return MambaMode("none")
    mode = requested
    if mode == "none":
        mode = "all" if supports_mamba_prefix_caching else "align"
    elif mode == "all" and not supports_mamba_prefix_caching:
        mode = "align"
    if mode == "align" and not enable_chunked_prefill:
        raise ConfigRejected("Chunked prefill is required for mamba cache mode 'align'.")
    return MambaMode(mode)


@dataclass(frozen=True)
class HybridBlocks:
    block_size: int                 # the attention block size
    mamba_block_size: int           # tokens per Mamba state block
    mamba_page_size_padded: int | None
    logs: tuple[str, ...] = ()


def hybrid_block_size(
    attn_page_per_token: int,
    mamba_page: int,
    *,
    block_size: int | None,
    mamba_cache_mode: Literal["none", "align", "all"],
    alignment: int,
    max_model_len: int,
    mamba_block_size: int | None = None,
    mamba_chunk_size: int = 0,
) -> HybridBlocks:
    """`HybridAttentionMambaModelConfig.verify_and_update_config`: the smallest aligned attention
    block whose page holds one Mamba state, and the Mamba page padded up to the attention page.

    `block_size` and `mamba_block_size` are the user's values (None when unset)."""
    logs: list[str] = []
    mamba_block = mamba_block_size if mamba_block_size is not None else (
        max_model_len if mamba_cache_mode == "none" else block_size
    )
    if mamba_cache_mode == "all":
        chunk = lcm(mamba_block_size or mamba_chunk_size, alignment)
        attn_block = chunk * cdiv(cdiv(mamba_page, attn_page_per_token), chunk)
        mamba_block = attn_block
    else:
        attn_block = alignment * cdiv(mamba_page, alignment * attn_page_per_token)
    if block_size is None or block_size < attn_block:
        block_size = attn_block
        logs.append(
            f"Setting attention block size to {attn_block} tokens to ensure that attention page size "
            "is >= mamba page size."
        )
    if mamba_cache_mode == "align":
        mamba_block = block_size
    assert mamba_block is not None
    attn_page = block_size * attn_page_per_token
    if attn_page == mamba_page:
        return HybridBlocks(block_size, mamba_block, None, tuple(logs))
    logs.append(
        f"Padding mamba page size by {100 * (attn_page - mamba_page) / mamba_page:.2f}% to ensure that "
        "mamba page size and attention page size are exactly equal."
    )
    return HybridBlocks(block_size, mamba_block, attn_page, tuple(logs))


def resolve_disable_hybrid_kv_cache_manager(
    requested: bool | None, has_chunked_local_attention: bool
) -> bool:
    """Unset means on (hybrid manager enabled), except for chunked local attention in 0.17.1."""
    return has_chunked_local_attention if requested is None else requested


# --- pipeline and tensor parallelism ------------------------------------------------------


def pp_partition(
    num_hidden_layers: int, pp_size: int, layer_partition: str | None = None
) -> tuple[tuple[int, ...], str | None]:
    """Layers per pipeline stage and vLLM's log line when the split is uneven.

    The remainder goes one layer each to stages -2, -3, ...: never the last stage (it holds the
    final norm), the first only when the remainder is pp_size - 1."""
    if layer_partition is not None:
        try:
            sizes = [int(part) for part in layer_partition.split(",")]
        except ValueError:
            raise ConfigRejected(f"Invalid partition string: {layer_partition}") from None
        if len(sizes) != pp_size:
            raise ConfigRejected(f"len(partitions)={len(sizes)} does not match pp_size={pp_size}.")
        if sum(sizes) != num_hidden_layers:
            raise ConfigRejected(
                f"sum(partitions)={sum(sizes)} does not match num_hidden_layers={num_hidden_layers}."
            )
        return tuple(sizes), None
    sizes = [num_hidden_layers // pp_size] * pp_size
    remainder = num_hidden_layers % pp_size
    if not remainder:
        return tuple(sizes), None
    for i in range(2, remainder + 2):
        sizes[-i] += 1
    return tuple(sizes), (
        f"Hidden layers were unevenly partitioned: [{','.join(str(size) for size in sizes)}]. "
        "This can be manually overridden using the VLLM_PP_LAYER_PARTITION environment variable"
    )


def get_pp_indices(
    num_hidden_layers: int, pp_rank: int, pp_size: int, layer_partition: str | None = None
) -> tuple[int, int]:
    """The `[start, end)` layer range of one pipeline stage."""
    sizes, _ = pp_partition(num_hidden_layers, pp_size, layer_partition)
    start = sum(sizes[:pp_rank])
    return start, start + sizes[pp_rank]


def kv_heads_per_rank(total_kv_heads: int, tp: int, replicate: bool = True) -> int:
    """KV heads one rank stores: fewer heads than ranks are replicated (one each), unless the
    model divides plainly (gpt-oss's attention does)."""
    return max(1, total_kv_heads // tp) if replicate else total_kv_heads // tp


def verify_tensor_parallel(shape: ModelShape, tp: int) -> None:
    """vLLM's checks on the attention heads; the KV-head checks are bare asserts in vLLM's
    attention layers, so kvplan words them."""
    if shape.num_attention_heads % tp:
        raise ConfigRejected(
            f"Total number of attention heads ({shape.num_attention_heads}) must be divisible by "
            f"tensor parallel size ({tp})."
        )
    if shape.use_mla:
        return  # one latent per layer, replicated on every rank
    for total in sorted({layer.num_kv_heads for layer in shape.kv_layers if layer.kind != "mamba"}):
        if total >= tp and total % tp:
            raise ConfigRejected(
                f"Total number of KV heads ({total}) must be divisible by tensor parallel size ({tp})."
            )
        if total < tp and tp % total:
            raise ConfigRejected(
                f"Tensor parallel size ({tp}) must be divisible by the total number of KV heads ({total}) "
                "when there are fewer KV heads than ranks."
            )


# --- dtypes -------------------------------------------------------------------------------

_EXPLICIT_DTYPES = {"half": "float16", "float16": "float16", "float": "float32", "float32": "float32",
                    "bfloat16": "bfloat16"}
_FLOAT16_NOT_SUPPORTED = frozenset({"gemma2", "gemma3", "gemma3_text", "plamo2", "glm4"})
KV_CACHE_DTYPES = {
    "fp8": "uint8", "fp8_e4m3": "uint8", "fp8_e5m2": "uint8", "fp8_ds_mla": "uint8",
    "fp8_inc": "float8_e4m3fn", "bfloat16": "bfloat16",
}


@dataclass(frozen=True)
class DtypeChoice:
    dtype: str
    logs: tuple[str, ...] = ()


def _platform_dtypes(capability: tuple[int, int] | None) -> list[str]:
    major = 9 if capability is None else capability[0]
    if major >= 8:
        return ["bfloat16", "float16", "float32"]
    if major >= 6:
        return ["float16", "float32"]
    return ["float32"]


def resolve_model_dtype(
    requested: str,
    config_dtype: str | None,
    model_type: str,
    capability: tuple[int, int] | None = None,
    *,
    is_pooling_model: bool = False,
    gpu_name: str = "cuda",
) -> DtypeChoice:
    """`_get_and_verify_dtype`: the dtype the model (and an "auto" KV cache) runs in.

    `config_dtype` None means no dtype in the config and none from the hub: float32."""
    config = config_dtype or "float32"
    logs: list[str] = []
    wanted = requested.lower()
    if wanted == "auto":
        supported = [
            d for d in _platform_dtypes(capability)
            if not (d == "float16" and model_type in _FLOAT16_NOT_SUPPORTED)
        ]
        preferred = "float16" if is_pooling_model and "float16" in supported else supported[0]
        candidate = preferred if config == "float32" else config
        if candidate in supported:
            dtype = candidate
        else:
            device = f"{gpu_name!r}"
            if capability is not None:
                device += f" (with compute capability {capability[0]}.{capability[1]})"
            logs.append(
                f"Your device {device} doesn't support torch.{candidate}. Falling back to "
                f"torch.{preferred} for compatibility."
            )
            dtype = preferred
    elif wanted in _EXPLICIT_DTYPES:
        dtype = _EXPLICIT_DTYPES[wanted]
    else:
        raise ConfigRejected(
            f"Unknown dtype: {wanted!r}; --dtype takes auto, bfloat16, float16 (half) or float32 (float)"
        )
    if dtype == "float16" and model_type in _FLOAT16_NOT_SUPPORTED:
        raise ConfigRejected(
            f"The model type {model_type!r} does not support float16. Reason: Numerical instability. "
            "Please use bfloat16 or float32 instead."
        )
    if dtype != config:
        verb = "Upcasting" if dtype == "float32" else "Downcasting" if config == "float32" else "Casting"
        logs.append(f"{verb} torch.{config} to torch.{dtype}.")
    return DtypeChoice(dtype, tuple(logs))


def kv_cache_dtype(cache_dtype: str, model_dtype: str) -> str:
    """The storage dtype of attention KV: "auto" follows the resolved model dtype, fp8 is bytes."""
    if cache_dtype == "auto":
        return model_dtype
    if cache_dtype not in KV_CACHE_DTYPES:
        choices = ", ".join(["auto", *KV_CACHE_DTYPES])
        raise ConfigRejected(f"--kv-cache-dtype {cache_dtype!r} is not known; choose one of {choices}")
    return KV_CACHE_DTYPES[cache_dtype]
