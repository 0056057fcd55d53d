"""Hook specifications of the `tgi` plugin host.

A plugin is a module (or object) named by an entry point in the ``tgi.backends`` group, whose functions are
marked with ``tgi.core.plugins.hookimpl``. The in-tree backends register through the same entry point as a
third-party package, for example in its ``pyproject.toml``::

    [project.entry-points."tgi.backends"]
    mychip = "tgi_mychip.plugin"

and in ``tgi_mychip/plugin.py``::

    from tgi.core.interfaces import INTERFACE_VERSION
    from tgi.core.plugins import BackendSpec, hookimpl

    @hookimpl
    def tgi_register_backends(register):
        register(BackendSpec(name="mychip", version=__version__, interface_version=INTERFACE_VERSION,
                             priority=50, description="...", probe=_probe, create=_create))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from tgi.core.plugins.spec import BackendSpec

PROJECT_NAME = "tgi"
#: the setuptools entry-point group that plugins register in
ENTRY_POINT_GROUP = "tgi.backends"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def tgi_register_backends(register: Callable[[BackendSpec], None]) -> None:
    """Register the hardware backends that this plugin provides.

    Called once per plugin, when the host loads the plugins (at start-up, and by ``tgi backends``).

    :param register:
        Call it once per backend with a :class:`~tgi.core.plugins.spec.BackendSpec`. The host keeps every
        spec, checks its ``interface_version`` against :data:`tgi.core.interfaces.INTERFACE_VERSION` and
        refuses a mismatch with a message naming both versions; a name registered twice is refused too.

    Keep this hook cheap and free of side effects: do not import the hardware's libraries here (CUDA,
    JAX, Neuron...). Put that in ``BackendSpec.probe`` (which says whether the backend can run here, and
    why not) and ``BackendSpec.create`` (which builds the backend once it is selected). An exception raised
    here marks the plugin as broken, with the exception as the reason; other plugins are unaffected.

    The return value is ignored.
    """
