"""What the config classes a vLLM release reads config.json with refuse before any model exists
(`Release.config_classes`): transformers 4.57's classes (vLLM 0.17.1, which brings its own classes
for some models, Qwen3-Next among them) check the length of `layer_types` in a few classes only;
transformers 5's strict dataclasses (vLLM 0.33.0) check it in every class and refuse a null where a
class types a field as an integer.

    check_config_classes(view, release) -> None      (ConfigRejected, in the class's words)"""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.errors import ConfigRejected
from kvplan.semantics.models.config_fields import ConfigView
from kvplan.semantics.releases import ConfigClasses, Release


@dataclass(frozen=True)
class ConfigClassRules:
    # model types whose class checks len(layer_types) == num_hidden_layers; None: every class does
    layer_types_checked: frozenset[str] | None
    layer_types_text: str                  # the refusal, formatted with {layers} and {entries}
    integer_head_dim: frozenset[str]       # model types whose class refuses "head_dim": null


# Release.config_classes -> the rules of those classes, for the model types kvplan reads
CONFIG_CLASSES: dict[ConfigClasses, ConfigClassRules] = {
    "transformers_4_57": ConfigClassRules(
        layer_types_checked=frozenset({
            "qwen2", "qwen3", "gemma2", "gemma3_text", "gpt_oss", "llama4_text", "qwen3_5_text", "qwen3_5_moe_text",
        }),
        layer_types_text="`num_hidden_layers` ({layers}) must be equal to the number of layer types ({entries})",
        integer_head_dim=frozenset(),
    ),
    "transformers_5": ConfigClassRules(
        layer_types_checked=None,
        layer_types_text="`num_hidden_layers` ({layers}) must be equal to the number of `layer_types` ({entries})",
        integer_head_dim=frozenset({
            "qwen3", "gemma2", "gemma3_text", "gpt_oss", "qwen3_next", "nemotron_h", "llama4_text", "qwen3_5_text",
            "qwen3_5_moe_text",
        }),
    ),
}


def check_config_classes(view: ConfigView, release: Release) -> None:
    """The refusals of the release's config class for this (text) config."""
    rules = CONFIG_CLASSES[release.config_classes]
    if view.model_type in rules.integer_head_dim and "head_dim" in view.raw and view.raw["head_dim"] is None:
        raise ConfigRejected(
            "Validation error for field 'head_dim': TypeError: Field 'head_dim' expected int, got NoneType "
            "(value: None). Give head_dim a number or drop the key (the class default applies then)"
        )
    layer_types = view.raw.get("layer_types")
    checked = rules.layer_types_checked is None or view.model_type in rules.layer_types_checked
    if checked and isinstance(layer_types, list) and view.has("num_hidden_layers"):
        layers = view.integer("num_hidden_layers")
        if len(layer_types) != layers:
            raise ConfigRejected(rules.layer_types_text.format(layers=layers, entries=len(layer_types)))
