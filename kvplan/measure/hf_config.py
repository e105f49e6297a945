"""Model configs through transformers: the config object of an architecture kvplan does not read
itself (AutoConfig, or the model's own code with --trust-remote-code), and the ModelShape of any
model, known or not. transformers is imported only for an unknown architecture."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvplan.errors import KvplanError, MissingExtraError
from kvplan.semantics.models.config_file import ResolvedConfig
from kvplan.semantics.models.reader import UnknownArchitecture, shape_from_config, shape_from_hf_config
from kvplan.semantics.models.shape import ModelShape
from kvplan.semantics.releases import Release
from kvplan.sources.installed import DEFAULT_RELEASE


def config_directory(resolved: ResolvedConfig) -> str | None:
    """The directory a local or cached config.json sits in (its model code, its weights)."""
    return str(Path(resolved.path).parent) if resolved.source != "hub" else None


def model_shape(
    config: Mapping[str, Any], model_id: str, *, trust_remote_code: bool = False, config_dir: str | None = None,
    release: Release = DEFAULT_RELEASE,
) -> ModelShape:
    """The light reader for the architectures kvplan knows (as `release` reads the config), else
    transformers' config object."""
    try:
        return shape_from_config(config, model_id, release)
    except UnknownArchitecture as unknown:
        architecture = unknown.architecture
    hf = hf_config_from(config, architecture, trust_remote_code, config_dir)
    return shape_from_hf_config(hf, config, model_id, architecture)


def hf_config_from(config: Mapping[str, Any], architecture: str, trust_remote_code: bool, config_dir: str | None
                   ) -> Any:
    """transformers' config object for `config`: its registered class, or the model's own code from
    `config_dir` when trust_remote_code is given."""
    if importlib.util.find_spec("transformers") is None:
        raise MissingExtraError(f"reading {architecture or 'this'} config (an architecture kvplan does not know)",
                                "transformers")
    from transformers import CONFIG_MAPPING, AutoConfig

    model_type = config.get("model_type")
    try:
        if trust_remote_code and config_dir is not None and config.get("auto_map"):
            return AutoConfig.from_pretrained(config_dir, trust_remote_code=True)
        if isinstance(model_type, str) and model_type in CONFIG_MAPPING:
            fields = {key: value for key, value in config.items() if key != "model_type"}
            return CONFIG_MAPPING[model_type].from_dict(fields)
    except Exception as error:
        # a config class validates in its own way (ValueError, huggingface_hub's StrictDataclassError, a
        # model's own code raising anything): the config is bad input, said on one line
        raise KvplanError(f"transformers cannot read this config ({architecture or '?'}): "
                          f"{type(error).__name__}: {error}") from None
    hint = "pass --trust-remote-code with a local model directory that holds its configuration code" \
        if not trust_remote_code else "give a local model directory that holds its configuration code"
    raise KvplanError(f"architecture {architecture or '?'} (model_type {model_type!r}) is unknown to kvplan and "
                      f"to the installed transformers: {hint}")
