"""The plugin host: finds backends through entry points, reports failures, selects one."""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

import pluggy

from tgi.core.interfaces import INTERFACE_VERSION
from tgi.core.interfaces.types import ProbeResult
from tgi.core.plugins import hookspecs
from tgi.core.plugins.spec import BackendSpec

#: comma-separated entry-point names: load only these plugins (tests use it to ignore foreign plugins)
ENV_ALLOW = "TGI_PLUGINS"
#: set to 1 to load no plugin from entry points (only those passed in code)
ENV_DISABLE_AUTOLOAD = "TGI_DISABLE_PLUGIN_AUTOLOAD"


class BackendSelectionError(RuntimeError):
    """The requested backend cannot be used; the message says why."""


@dataclass
class BackendEntry:
    """One backend as the host sees it, usable or not."""

    name: str
    plugin: str  # the entry point (or plugin object) name it came from
    spec: BackendSpec | None  # None when the plugin could not be loaded
    error: str = ""  # why it is unusable: import failure, hook failure, interface mismatch
    probe_result: ProbeResult | None = None  # filled by probe()

    @property
    def loaded(self) -> bool:
        return self.spec is not None and not self.error

    @property
    def version(self) -> str:
        return self.spec.version if self.spec else "?"


def _describe(exc: BaseException) -> str:
    """`ExcType: message (at file:line)` — enough to act on without a full traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


class BackendRegistry:
    """Loads plugins and answers which backends exist, which can run here, and which to use.

    :param plugins: plugin objects to register besides entry points (name -> module or object)
    :param autoload: load the ``tgi.backends`` entry points (``TGI_DISABLE_PLUGIN_AUTOLOAD=1`` turns it off)
    :param allow: load only entry points with these names (default: ``TGI_PLUGINS``, else all)
    """

    def __init__(
        self,
        plugins: dict[str, object] | None = None,
        autoload: bool | None = None,
        allow: Iterable[str] | None = None,
    ) -> None:
        if autoload is None:
            autoload = os.environ.get(ENV_DISABLE_AUTOLOAD, "") not in ("1", "true", "yes")
        if allow is None and os.environ.get(ENV_ALLOW):
            allow = [n.strip() for n in os.environ[ENV_ALLOW].split(",") if n.strip()]
        self._allow = set(allow) if allow is not None else None
        self._pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        self._entries: dict[str, BackendEntry] = {}
        if autoload:
            for ep in entry_points(group=hookspecs.ENTRY_POINT_GROUP):
                if self._allow is None or ep.name in self._allow:
                    self._load_entry_point(ep)
        for name, plugin in (plugins or {}).items():
            self._register_plugin(name, plugin)

    # -- loading --------------------------------------------------------------------------------------
    def _load_entry_point(self, ep: EntryPoint) -> None:
        try:
            plugin = ep.load()
        except Exception as exc:  # a broken plugin is reported, never swallowed, and never fatal to others
            self._entries[ep.name] = BackendEntry(
                ep.name, ep.name, None, f"plugin '{ep.value}' failed to import: {_describe(exc)}"
            )
            return
        self._register_plugin(ep.name, plugin)

    def _register_plugin(self, plugin_name: str, plugin: object) -> None:
        try:
            self._pm.register(plugin, name=plugin_name)
        except Exception as exc:  # e.g. a hook with an unknown name or wrong arguments
            self._entries[plugin_name] = BackendEntry(
                plugin_name, plugin_name, None, f"invalid plugin: {_describe(exc)}"
            )
            return
        registered: list[BackendSpec] = []
        # call each plugin's hook on its own so that one failing plugin cannot hide another's backends
        for impl in self._pm.hook.tgi_register_backends.get_hookimpls():
            if impl.plugin_name != plugin_name:
                continue
            try:
                impl.function(register=registered.append)
            except Exception as exc:
                self._entries[plugin_name] = BackendEntry(
                    plugin_name, plugin_name, None, f"tgi_register_backends raised {_describe(exc)}"
                )
                return
        for spec in registered:
            self._add_spec(plugin_name, spec)

    def _add_spec(self, plugin_name: str, spec: BackendSpec) -> None:
        error = ""
        if spec.interface_version != INTERFACE_VERSION:
            error = (
                f"backend '{spec.name}' {spec.version} was built for tgi backend interface v{spec.interface_version}, "
                f"but this tgi implements v{INTERFACE_VERSION}: install a version of the plugin built for "
                f"interface v{INTERFACE_VERSION}"
            )
        elif spec.name in self._entries:
            error = f"backend name '{spec.name}' is already registered by plugin '{self._entries[spec.name].plugin}'"
            self._entries[f"{spec.name}@{plugin_name}"] = BackendEntry(spec.name, plugin_name, spec, error)
            return
        self._entries[spec.name] = BackendEntry(spec.name, plugin_name, spec, error)

    # -- queries --------------------------------------------------------------------------------------
    def entries(self) -> list[BackendEntry]:
        """Every backend seen, usable or not, sorted by name."""
        return sorted(self._entries.values(), key=lambda e: e.name)

    def names(self) -> list[str]:
        return sorted({e.name for e in self._entries.values()})

    def probe(self, name: str) -> ProbeResult:
        """Probe one backend (cached); a probe that raises counts as unavailable with the exception."""
        entry = self._entry(name)
        if entry.probe_result is None:
            if not entry.loaded:
                entry.probe_result = ProbeResult.unavailable(entry.error)
            else:
                try:
                    entry.probe_result = entry.spec.probe()
                except Exception as exc:
                    entry.probe_result = ProbeResult.unavailable(f"probe raised {_describe(exc)}")
        return entry.probe_result

    def select(self, name: str = "auto") -> BackendSpec:
        """The spec of backend `name`, or with `auto` the available backend of highest priority.

        Raises `BackendSelectionError` for an unknown name (listing the known ones), a backend that failed
        to load, or one whose probe says it cannot run here (with its reason).
        """
        name = (name or "auto").strip().lower()
        if name == "auto":
            return self._select_auto()
        entry = self._entry(name)
        result = self.probe(name)
        if not result.available:
            raise BackendSelectionError(f"backend '{name}' is not available: {result.reason}")
        return entry.spec

    def _select_auto(self) -> BackendSpec:
        candidates = []
        reasons = []
        for entry in self.entries():
            result = self.probe(entry.name)
            if result.available:
                candidates.append(entry.spec)
            else:
                reasons.append(f"  {entry.name}: {result.reason}")
        if not candidates:
            detail = "\n".join(reasons) if reasons else "  (no backend plugin is installed)"
            raise BackendSelectionError(f"no backend is available on this machine:\n{detail}")
        # highest priority first; equal priorities resolve by name so that the choice is stable
        return sorted(candidates, key=lambda s: (-s.priority, s.name))[0]

    def _entry(self, name: str) -> BackendEntry:
        if name not in self._entries:
            known = ", ".join(self.names()) or "none"
            raise BackendSelectionError(f"unknown backend '{name}' (known backends: {known}; or 'auto')")
        return self._entries[name]
