"""Model loading: resolve a model id to local files, read its config and stream its weights.

Nothing here imports torch at import time: `load_config` / `iter_weights` import the format's loader on use.
"""

from tgi.core.loading.resolve import (
    DEFAULT_MODEL_ID,
    ModelNotFoundError,
    default_model_path,
    iter_weights,
    load_config,
    resolve_model,
)
from tgi.core.loading.selection import WeightSelector
from tgi.core.loading.source import ModelSource

__all__ = [
    "DEFAULT_MODEL_ID",
    "ModelNotFoundError",
    "ModelSource",
    "WeightSelector",
    "default_model_path",
    "iter_weights",
    "load_config",
    "resolve_model",
]
