"""Model configs -> ModelShape (kvplan's view of a model's KV layout). The configs come already read
(`kvplan.sources.models` finds them, `kvplan.sources.catalog` holds the bundled ones). Importing this
package never imports torch or transformers."""

from kvplan.semantics.models.config_file import ResolvedConfig
from kvplan.semantics.models.reader import shape_from_config
from kvplan.semantics.models.shape import LayerShape, MambaState, ModelShape

__all__ = [
    "LayerShape",
    "MambaState",
    "ModelShape",
    "ResolvedConfig",
    "shape_from_config",
]
