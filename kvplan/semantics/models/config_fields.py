"""Read config.json fields the way transformers' config classes do, without importing transformers:
the class defaults for keys a file leaves out (gemma-3's sparse `text_config` relies on them), the
attribute maps, and the 4.x/5.x spellings (`torch_dtype`/`dtype`, `rope_scaling`/`rope_parameters`).

The defaults are those of transformers 5.24's config classes, for the keys kvplan reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvplan.errors import KvplanError
from kvplan.semantics.dtypes import normalize_dtype

_MISSING: Any = object()

_QWEN2 = {
    "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 32768,
    "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 28,
}
_LINEAR_ATTENTION = {
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32,
}

# model_type -> class defaults. `None` for num_key_value_heads / head_dim means "derived" (heads,
# hidden / heads), as the classes do.
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {
        "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": None, "head_dim": None,
        "max_position_embeddings": 2048, "tie_word_embeddings": False,
    },
    "mistral": {
        "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": None,
        "max_position_embeddings": 131072, "tie_word_embeddings": False, "sliding_window": 4096,
    },
    "mixtral": {
        "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": None,
        "max_position_embeddings": 131072, "tie_word_embeddings": False, "sliding_window": None,
    },
    "phi3": {
        "vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": None, "max_position_embeddings": 4096,
        "tie_word_embeddings": False, "sliding_window": None,
    },
    "qwen2": dict(_QWEN2),
    "qwen3": {**_QWEN2, "head_dim": 128},
    "qwen3_moe": {
        **_QWEN2, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24,
        "num_key_value_heads": 4, "moe_intermediate_size": 768,
    },
    "qwen3_next": {
        "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 48,
        "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "max_position_embeddings": 32768,
        "tie_word_embeddings": False, "moe_intermediate_size": 512, **_LINEAR_ATTENTION,
    },
    "qwen3_5_moe_text": {
        "vocab_size": 248320, "hidden_size": 2048, "num_hidden_layers": 40, "num_attention_heads": 16,
        "num_key_value_heads": 2, "head_dim": 256, "max_position_embeddings": 32768,
        "tie_word_embeddings": False, "moe_intermediate_size": 512, **_LINEAR_ATTENTION,
    },
    "qwen3_5_text": {
        "vocab_size": 248320, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 32,
        "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 32768,
        "tie_word_embeddings": False, **_LINEAR_ATTENTION,
    },
    "deepseek_v2": {
        "vocab_size": 102400, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": None, "max_position_embeddings": 2048,
        "tie_word_embeddings": False, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "moe_intermediate_size": 1407,
    },
    "deepseek_v3": {
        "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
        "num_attention_heads": 128, "num_key_value_heads": 128, "max_position_embeddings": 4096,
        "tie_word_embeddings": False, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "moe_intermediate_size": 2048, "num_nextn_predict_layers": 1,
    },
    "gemma2": {
        "vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 8192,
        "tie_word_embeddings": True, "sliding_window": 4096,
    },
    "gemma3_text": {
        "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131072,
        "tie_word_embeddings": True, "sliding_window": 4096, "sliding_window_pattern": 6,
    },
    "nemotron_h": {
        "vocab_size": 131072, "hidden_size": 4096, "intermediate_size": 21504, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 4096, "tie_word_embeddings": False,
        "sliding_window": None, "ssm_state_size": 128, "mamba_num_heads": 128, "mamba_head_dim": 64,
        "n_groups": 8, "conv_kernel": 4, "chunk_size": 128,
    },
    "llama4_text": {
        "vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192, "num_hidden_layers": 48,
        "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 131072,
        "tie_word_embeddings": False, "no_rope_layers": None, "no_rope_layer_interval": 4,
        "attention_chunk_size": 8192,
    },
    "deepseek_v32": {
        "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
        "num_attention_heads": 128, "num_key_value_heads": 128, "max_position_embeddings": 4096,
        "tie_word_embeddings": False, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "moe_intermediate_size": 2048, "num_nextn_predict_layers": 1, "index_head_dim": 128,
    },
    "gpt_oss": {
        "vocab_size": 201088, "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 36,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "max_position_embeddings": 131072,
        "tie_word_embeddings": False, "sliding_window": 128,
    },
}

# model_type -> {attribute: key in config.json}
ATTRIBUTE_MAPS: dict[str, dict[str, str]] = {
    "nemotron_h": {"layer_types": "layers_block_type"},
}


@dataclass(frozen=True)
class ConfigView:
    """One (text) config dict seen through its class: explicit keys first, then class defaults."""

    raw: Mapping[str, Any]
    model_type: str
    where: str = "config.json"   # names the dict in error messages, e.g. "config.json text_config"
    defaults: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, raw: Mapping[str, Any], model_type: str, where: str = "config.json") -> ConfigView:
        return cls(raw, model_type, where, CLASS_DEFAULTS.get(model_type, {}))

    def _key(self, name: str) -> str:
        return ATTRIBUTE_MAPS.get(self.model_type, {}).get(name, name)

    def has(self, name: str) -> bool:
        """Present in the file with a non-null value."""
        return self.raw.get(self._key(name)) is not None

    def get(self, name: str, default: Any = _MISSING) -> Any:
        """The file's value (null included, as transformers keeps it), else the class default."""
        key = self._key(name)
        if key in self.raw:
            return self.raw[key]
        if name in self.defaults:
            return self.defaults[name]
        return None if default is _MISSING else default

    def require(self, *names: str) -> None:
        for name in names:
            if not self.has(name):
                raise KvplanError(
                    f"{self.where} ({self.model_type}) has no {self._key(name)!r}, which kvplan needs to size "
                    "this model's KV cache: add it to the config or use the model's genuine config.json"
                )

    def integer(self, name: str) -> int:
        value = self.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
            raise KvplanError(f"{self.where}: {self._key(name)!r} must be an integer, found {value!r}")
        return int(value)

    def optional_integer(self, name: str) -> int | None:
        return None if self.get(name) is None else self.integer(name)


def config_dtype(config: Mapping[str, Any]) -> str | None:
    """The checkpoint dtype as vLLM's `_find_dtype` looks for it: the root config, then the text config,
    then vision_config; `dtype` (5.x) and `torch_dtype` (4.x)."""
    for part in (config, config.get("text_config"), config.get("vision_config")):
        if isinstance(part, Mapping):
            for key in ("dtype", "torch_dtype"):
                if part.get(key) is not None:
                    return normalize_dtype(part[key])
    return None


def rope_parameter_sets(view: ConfigView) -> list[Mapping[str, Any]]:
    """rope_parameters (5.x) or rope_scaling (4.x), as a list of per-layer-type dicts, "type" read as
    "rope_type" the way vLLM's patch_rope_parameters does. Empty when the model has no rope scaling."""
    rope = view.raw.get("rope_parameters") or view.raw.get("rope_scaling")
    if not isinstance(rope, Mapping) or not rope:
        return []
    sets = list(rope.values()) if all(isinstance(value, Mapping) for value in rope.values()) else [rope]
    return [{**params, "rope_type": params.get("rope_type", params.get("type", "default"))} for params in sets]
