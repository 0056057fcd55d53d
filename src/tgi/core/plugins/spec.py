"""What a plugin registers for each backend it provides (no torch here)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tgi.core.interfaces.types import ProbeResult

if TYPE_CHECKING:
    from tgi.core.interfaces.backend import Backend


@dataclass(frozen=True)
class BackendSpec:
    """A backend, as registered by a plugin through ``tgi_register_backends``."""

    name: str  # what users select with --backend / TGI_BACKEND (lower case, no spaces)
    version: str  # the plugin's own version, shown by `tgi backends`
    interface_version: int  # the tgi backend interface it was built for (INTERFACE_VERSION)
    priority: int  # `--backend auto` picks the available backend with the highest priority
    description: str  # one line, shown by `tgi backends`
    probe: Callable[[], ProbeResult]  # cheap: can it run here, and if not, why (exceptions are reported)
    create: Callable[[], Backend]  # build the backend; called once, after a successful probe
