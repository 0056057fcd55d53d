"""tgi.core: the hardware-independent heart of tgi.

Interfaces that backends implement (`tgi.core.interfaces`), the plugin host (`tgi.core.plugins`), the
continuous-batching scheduler and paged block manager (pure Python), model definitions, weight loading,
tokenization and the engine.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tgi")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"
