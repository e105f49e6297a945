"""A flash-attention stand-in for transformers models, so the profile run holds what vLLM's
flash kernels hold: the output and a float32 log-sum-exp, never an S x S score matrix.

Stock `sdpa` on fake tensors takes the math path (B x H x S x S float32 scores: 25x too much
at 8192 tokens), and transformers builds an S x S causal mask for sdpa and eager whenever it
sees fake tensors. Registering this function together with the flash-attention mask builder
avoids both. The name holds no "flash": transformers 5 treats such names as hub kernels."""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

ATTENTION_NAME = "kvplan_varlen"


def _is_fake(tensor: torch.Tensor) -> bool:
    return isinstance(tensor, FakeTensor) or tensor.device.type == "meta"


def flashlike_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """(B, H, S, D) query and (B, KV, S, D) key/value -> (B, S, H, D), like flash_attn_varlen."""
    causal = bool(getattr(module, "is_causal", True)) and query.shape[2] > 1
    if _is_fake(query) and query.shape[-1] != value.shape[-1]:
        # MLA: V's head size differs from Q/K's; flash returns V-sized rows and a float32 LSE
        out = query.new_empty((*query.shape[:-1], value.shape[-1]))
        query.new_empty(query.shape[:-1], dtype=torch.float32)
    elif _is_fake(query):
        # The meta kernel of the flash op handles grouped-query attention without repeating K/V.
        out = torch.ops.aten._scaled_dot_product_flash_attention(
            query, key, value, 0.0, causal, scale=scaling
        )[0]
    else:
        groups = query.shape[1] // key.shape[1]
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=None, is_causal=causal, scale=scaling, enable_gqa=groups > 1
        )
    return out.transpose(1, 2), None


def register_flashlike_attention() -> str:
    """Register the stand-in with transformers (idempotent) and return its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(ATTENTION_NAME, flashlike_attention_forward)
    AttentionMaskInterface.register(ATTENTION_NAME, ALL_MASK_ATTENTION_FUNCTIONS["flash_attention_2"])
    return ATTENTION_NAME
