"""The plugin host: hook specifications, what plugins register, and backend selection."""

from tgi.core.plugins.hookspecs import ENTRY_POINT_GROUP, hookimpl, hookspec
from tgi.core.plugins.registry import BackendEntry, BackendRegistry, BackendSelectionError
from tgi.core.plugins.spec import BackendSpec

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendEntry",
    "BackendRegistry",
    "BackendSelectionError",
    "BackendSpec",
    "hookimpl",
    "hookspec",
]
