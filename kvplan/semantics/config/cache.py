"""vLLM's cache settings (`CacheConfig` and the platform and model hooks that change it): block
sizes (the user's, the MLA backends', the hybrid hook's), the KV-cache dtype, the Mamba cache
mode, and whether the hybrid KV cache manager is on. Where the releases differ, the release's
policy picks the rule (MLA_BLOCK_SIZE, HYBRID_ALIGNMENT, MAMBA_MODE_RULES).

    check_block_size(block_size) -> None
    mla_block_size(capability, block_size, *, sparse, qk_nope_head_dim, backend=None, cache_dtype="auto",
                   release) -> BlockSizeChoice
    kernel_block_alignment(capability, head_size, use_mla, backend=None) -> int
    hybrid_alignment(kernel_alignment, configured_block_size, use_mla, release) -> int
    resolve_mamba_cache_mode(enable_prefix_caching, supports_mamba_prefix_caching, ..., *, release) -> MambaMode
    hybrid_block_size(attn_page_per_token, mamba_page, *, ...) -> HybridBlocks
    kv_cache_dtype(cache_dtype, model_dtype) -> str
    utilization_problem(value) -> what is wrong with a gpu_memory_utilization, or None
    resolve_disable_hybrid_kv_cache_manager(requested, has_chunked_local_attention, allow) -> HybridManagerChoice"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import lcm
from typing import Literal

from kvplan.errors import ConfigRejected
from kvplan.semantics.releases import HybridBlockAlignment, MambaCacheMode, MlaBlockSize, Release
from kvplan.units import cdiv

# vLLM's `CacheConfig.block_size` literal: the sizes a user may ask for
ALLOWED_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
KV_CACHE_DTYPES = {
    "fp8": "uint8", "fp8_e4m3": "uint8", "fp8_e5m2": "uint8", "fp8_ds_mla": "uint8",
    "fp8_inc": "float8_e4m3fn", "bfloat16": "bfloat16",
}


def check_block_size(block_size: int) -> None:
    """`--block-size` must be one of vLLM's literal values (a derived hybrid block is exempt)."""
    if block_size not in ALLOWED_BLOCK_SIZES:
        allowed = ", ".join(str(size) for size in ALLOWED_BLOCK_SIZES)
        raise ConfigRejected(f"--block-size {block_size} is not allowed: vLLM accepts {allowed}")


@dataclass(frozen=True)
class BlockSizeChoice:
    block_size: int
    backend: str | None   # the MLA backend whose constraint was checked, None when none applies
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


def _forced_by_backend(
    capability: tuple[int, int] | None, block_size: int | None, sparse: bool, qk_nope_head_dim: int,
    backend: str | None, cache_dtype: str, default_block_size: int,
) -> BlockSizeChoice:
    """0.17.1's `CudaPlatform.check_and_update_config`: a backend replaces the block size only when the
    requested one (the release's default when unset) does not suit it. Sparse MLA needs 64 anywhere."""
    requested = default_block_size if block_size is None else block_size
    chosen = backend or _default_mla_backend(capability, sparse, qk_nope_head_dim)
    size = _mla_backend_size(chosen, requested, capability)
    if sparse:
        chosen = backend if backend == "FLASHINFER_MLA_SPARSE" else "FLASHMLA_SPARSE"
        keeps = (32, 64) if chosen == "FLASHINFER_MLA_SPARSE" else (64,)
        size = size if size in keeps else 64
    if size == requested:
        return BlockSizeChoice(requested, chosen)
    log = f"Forcing kv cache block size to {size} for {_BACKEND_LOG_NAME[chosen or '']} backend."
    return BlockSizeChoice(size, chosen, log)


# the kernel block sizes each MLA backend supports (`get_supported_kernel_block_sizes`): fixed sizes,
# and the base of a `MultipleOf` (0 where there is none)
_MLA_KERNEL_BLOCKS: dict[str, tuple[tuple[int, ...], int]] = {
    "FLASH_ATTN_MLA": ((), 16), "TRITON_MLA": ((), 16), "FLASHMLA": ((64,), 0), "CUTLASS_MLA": ((128,), 0),
    "FLASHINFER_MLA": ((32, 64), 0), "FLASHMLA_SPARSE": ((64,), 0), "FLASHINFER_MLA_SPARSE": ((), 32),
}


def preferred_backend_block_size(backend: str | None, default_block_size: int) -> int:
    """`AttentionBackend.get_preferred_block_size(default)`: the default when the backend's kernels take
    it, else the smallest size they take (docs/vllm/changes-0.34.md section 2.1; 0.33.0's default is 16,
    0.34.0's 64)."""
    sizes, multiple = _MLA_KERNEL_BLOCKS.get(backend or "", ((), 1))
    if default_block_size in sizes or (multiple and default_block_size % multiple == 0):
        return default_block_size
    return min((*sizes, *((multiple,) if multiple else ())))


# FlashAttention MLA (Hopper's first choice) keeps the cache in the model's precision
_FLASH_ATTN_MLA_CACHE_DTYPES = ("auto", "bfloat16", "float16")


def _preferred_mla_backend(
    capability: tuple[int, int] | None, sparse: bool, cache_dtype: str
) -> str | None:
    """The first MLA backend of 0.33.0's CUDA priorities that takes this GPU and cache dtype."""
    if capability is None:
        return None
    if sparse:
        return "FLASHMLA_SPARSE"
    if capability[0] == 10:
        return "FLASHINFER_MLA"
    if capability[0] == 9:
        return "FLASH_ATTN_MLA" if cache_dtype in _FLASH_ATTN_MLA_CACHE_DTYPES else "FLASHMLA"
    return "TRITON_MLA"


def _preferred_by_backend(
    capability: tuple[int, int] | None, block_size: int | None, sparse: bool, qk_nope_head_dim: int,
    backend: str | None, cache_dtype: str, default_block_size: int,
) -> BlockSizeChoice:
    """0.33.0's `Platform.update_block_size_for_backend`: a requested block size stays (the backend is
    chosen to take it); otherwise the selected backend's preferred size against the release's default,
    logged where it differs from that default."""
    if block_size is not None:
        return BlockSizeChoice(block_size, backend)
    chosen = backend or _preferred_mla_backend(capability, sparse, cache_dtype)
    size = preferred_backend_block_size(chosen, default_block_size)
    if size == default_block_size:
        return BlockSizeChoice(size, chosen)
    return BlockSizeChoice(size, chosen, f"Setting kv cache block size to {size} for {chosen} backend(s).")


# Release.mla_block_size -> the block size an MLA model ends up with
MLA_BLOCK_SIZE: dict[MlaBlockSize, Callable[..., BlockSizeChoice]] = {
    "forced_by_backend": _forced_by_backend,
    "preferred_by_backend": _preferred_by_backend,
}


def mla_block_size(
    capability: tuple[int, int] | None,
    block_size: int | None,
    *,
    sparse: bool,
    qk_nope_head_dim: int,
    backend: str | None = None,
    cache_dtype: str = "auto",
    release: Release,
) -> BlockSizeChoice:
    """The block size of an MLA model on this GPU, by the release's rule."""
    return MLA_BLOCK_SIZE[release.mla_block_size](capability, block_size, sparse, qk_nope_head_dim, backend,
                                                  cache_dtype, release.default_block_size)


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


# Release.hybrid_block_alignment -> (kernel alignment, configured block size, MLA) -> the multiple
HYBRID_ALIGNMENT: dict[HybridBlockAlignment, Callable[[int, int, bool], int]] = {
    "kernel_block": lambda kernel, configured, use_mla: kernel,
    # 0.33.0: max(the backend's smallest kernel block, cache_config.block_size), MLA at least 128 (the
    # configured block is the release's default when unset: 16, 64 in 0.34.0)
    "kernel_or_configured_block": lambda kernel, configured, use_mla: max(kernel, configured, 128 if use_mla else 1),
}


def hybrid_alignment(kernel_alignment: int, configured_block_size: int | None, use_mla: bool, release: Release) -> int:
    """The multiple a Mamba hybrid's attention block is rounded up to."""
    configured = release.default_block_size if configured_block_size is None else configured_block_size
    return HYBRID_ALIGNMENT[release.hybrid_block_alignment](kernel_alignment, configured, use_mla)


def utilization_problem(value: object) -> str | None:
    """vLLM's rule for `gpu_memory_utilization` (`Field(gt=0, le=1)`): what is wrong, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        return f"expected a number in (0, 1], e.g. 0.9, got {value!r}"
    return None


# --- Mamba hybrids ------------------------------------------------------------------------

MAMBA_PREFIX_CACHING_ARCHITECTURES = frozenset({"NemotronHForCausalLM"})


@dataclass(frozen=True)
class MambaMode:
    mode: Literal["none", "align", "all"]
    logs: tuple[str, ...] = ()


def _none_align_all(enable_prefix_caching: bool, supports_mamba_prefix_caching: bool,
                    requested: Literal["none", "align", "all"], enable_chunked_prefill: bool,
                    architecture: str) -> MambaMode:
    """0.17.1's `MambaModelConfig.verify_and_update_config`: caching off means one state block per
    request; on, "all" for models that support Mamba prefix caching, else "align"."""
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


def _none_align(enable_prefix_caching: bool, supports_mamba_prefix_caching: bool,
                requested: Literal["none", "align", "all"], enable_chunked_prefill: bool,
                architecture: str) -> MambaMode:
    """0.33.0: "all" is gone; prefix caching means "align" for every Mamba model."""
    if requested == "all":
        raise ConfigRejected("mamba_cache_mode 'all' does not exist in this vLLM release: use 'align' or 'none'")
    if not enable_prefix_caching:
        if requested != "none":
            return MambaMode("none", ("Mamba cache mode is set to 'none' when prefix caching is disabled",))
        return MambaMode("none")
    logs: tuple[str, ...] = ()
    mode: Literal["none", "align", "all"] = requested
    if mode == "none":
        mode = "align"
        logs = (f"Mamba cache mode is set to 'align' for {architecture} by default when prefix caching is "
                "enabled",)
    if not enable_chunked_prefill:
        raise ConfigRejected("Chunked prefill is required for Mamba prefix caching.")
    return MambaMode(mode, logs)


# Release.mamba_cache_modes (the modes with prefix caching on) -> the Mamba cache mode vLLM settles on
MAMBA_MODE_RULES: dict[tuple[MambaCacheMode, ...],
                        Callable[[bool, bool, Literal["none", "align", "all"], bool, str], MambaMode]] = {
    ("align", "all"): _none_align_all,
    ("align",): _none_align,
}


def resolve_mamba_cache_mode(
    enable_prefix_caching: bool,
    supports_mamba_prefix_caching: bool,
    requested: Literal["none", "align", "all"] = "none",
    enable_chunked_prefill: bool = True,
    architecture: str = "",
    *,
    release: Release,
) -> MambaMode:
    """`MambaModelConfig.verify_and_update_config` of the release."""
    return MAMBA_MODE_RULES[release.mamba_cache_modes](
        enable_prefix_caching, supports_mamba_prefix_caching, requested, enable_chunked_prefill, architecture)


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


CHUNKED_LOCAL_HYBRID_WARNING = (
    "There is a latency regression when using chunked local attention with the hybrid KV cache manager. "
    "Disabling it, by default. To enable it, set the environment "
    "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1."
)


@dataclass(frozen=True)
class HybridManagerChoice:
    disabled: bool
    logs: tuple[str, ...] = ()


def resolve_disable_hybrid_kv_cache_manager(
    requested: bool | None, has_chunked_local_attention: bool, allow_chunked_local_with_hybrid: bool = True,
) -> HybridManagerChoice:
    """`VllmConfig.__post_init__` on a GPU without KV events or connectors: unset, the hybrid manager
    is on, except for a model with chunked local attention when
    VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE is 0 (it is 1 unless set, in 0.17.1 and 0.33.0).
    An explicit enable that the rule would turn off is refused, as vLLM does."""
    needs_disabling = has_chunked_local_attention and not allow_chunked_local_with_hybrid
    logs = (CHUNKED_LOCAL_HYBRID_WARNING,) if needs_disabling else ()
    if requested is None:
        return HybridManagerChoice(needs_disabling, logs)
    if requested is False and needs_disabling:
        raise ConfigRejected(
            "Hybrid KV cache manager was explicitly enabled but is not supported in this configuration. "
            "Consider omitting the --no-disable-hybrid-kv-cache-manager flag to let vLLM decide automatically."
        )
    return HybridManagerChoice(requested, logs)


# --- KV-cache dtype -------------------------------------------------------------------------

def kv_cache_dtype(cache_dtype: str, model_dtype: str) -> str:
    """The storage dtype of attention KV: "auto" follows the resolved model dtype, fp8 is bytes."""
    check_kv_cache_dtype(cache_dtype)
    return model_dtype if cache_dtype == "auto" else KV_CACHE_DTYPES[cache_dtype]


def check_kv_cache_dtype(cache_dtype: str) -> None:
    """vLLM's `--kv-cache-dtype` choices, checked before any model is read (every value of a
    `kvplan fit` list or a sweep axis is checked this way before the first plan)."""
    if cache_dtype != "auto" and cache_dtype not in KV_CACHE_DTYPES:
        choices = ", ".join(["auto", *KV_CACHE_DTYPES])
        raise ConfigRejected(f"--kv-cache-dtype {cache_dtype!r} is not known; choose one of {choices}")
