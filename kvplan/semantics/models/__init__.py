"""Model configs -> ModelShape (kvplan's view of a model's KV layout) and the bundled catalog.
Importing this package never imports torch or transformers."""

from kvplan.semantics.models.catalog import catalog_ids
from kvplan.semantics.models.reader import shape_from_config
from kvplan.semantics.models.resolve import ResolvedConfig, resolve_config
from kvplan.semantics.models.shape import LayerShape, MambaState, ModelShape

__all__ = [
    "LayerShape",
    "MambaState",
    "ModelShape",
    "ResolvedConfig",
    "catalog_ids",
    "resolve_config",
    "shape_from_config",
]
