"""The plugin host: discovery through entry points, selection, priority, failures reported with reasons."""

from __future__ import annotations

import importlib.metadata
import inspect
import sys
import textwrap
import types

import pytest

from tgi.core.interfaces import INTERFACE_VERSION, ProbeResult
from tgi.core.plugins import BackendRegistry, BackendSelectionError, BackendSpec, hookimpl, hookspecs


def make_plugin(*specs: BackendSpec) -> types.SimpleNamespace:
    @hookimpl
    def tgi_register_backends(register):
        for spec in specs:
            register(spec)

    return types.SimpleNamespace(tgi_register_backends=tgi_register_backends)


def spec(name, priority=0, available=True, reason="", interface_version=INTERFACE_VERSION):
    return BackendSpec(
        name=name,
        version="9.9",
        interface_version=interface_version,
        priority=priority,
        description=f"test backend {name}",
        probe=lambda: ProbeResult(available, reason or ("found" if available else "no device")),
        create=lambda: None,
    )


def test_cpu_backend_is_discovered_through_its_entry_point():
    eps = importlib.metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP)
    assert "cpu" in eps.names, "the in-tree cpu backend must register through the public entry-point group"
    registry = BackendRegistry()
    assert registry.names() == ["cpu"]  # TGI_PLUGINS=cpu from conftest: nothing foreign is loaded
    assert registry.probe("cpu").available
    assert registry.select("auto").name == "cpu"
    assert registry.select("cpu").name == "cpu"


def test_auto_picks_the_available_backend_with_the_highest_priority():
    plugin = make_plugin(
        spec("fast", priority=100, available=False, reason="no FastChip driver found"),
        spec("medium", priority=50),
        spec("slow", priority=10),
    )
    registry = BackendRegistry(plugins={"test": plugin}, autoload=False)
    assert registry.select("auto").name == "medium"
    with pytest.raises(BackendSelectionError, match="'fast' is not available: no FastChip driver found"):
        registry.select("fast")
    assert registry.select("slow").name == "slow"


def test_equal_priorities_resolve_by_name():
    registry = BackendRegistry(plugins={"p": make_plugin(spec("b", 5), spec("a", 5))}, autoload=False)
    assert registry.select("auto").name == "a"


def test_unknown_backend_lists_the_known_ones():
    registry = BackendRegistry(plugins={"p": make_plugin(spec("alpha"), spec("beta"))}, autoload=False)
    with pytest.raises(
        BackendSelectionError, match=r"unknown backend 'nosuch' \(known backends: alpha, beta"
    ):
        registry.select("nosuch")


def test_no_available_backend_gives_every_reason():
    plugin = make_plugin(
        spec("x", available=False, reason="no X card"), spec("y", available=False, reason="no Y")
    )
    registry = BackendRegistry(plugins={"p": plugin}, autoload=False)
    with pytest.raises(BackendSelectionError) as info:
        registry.select("auto")
    assert "x: no X card" in str(info.value) and "y: no Y" in str(info.value)


def test_mismatched_interface_version_is_refused_with_both_versions():
    registry = BackendRegistry(
        plugins={"old": make_plugin(spec("old", interface_version=INTERFACE_VERSION + 1))}, autoload=False
    )
    entry = registry.entries()[0]
    assert not entry.loaded
    with pytest.raises(BackendSelectionError) as info:
        registry.select("old")
    message = str(info.value)
    assert f"interface v{INTERFACE_VERSION + 1}" in message and f"implements v{INTERFACE_VERSION}" in message


def test_a_probe_that_raises_is_reported_not_swallowed():
    def bad_probe():
        raise OSError("driver returned error 999")

    broken = BackendSpec("flaky", "1", INTERFACE_VERSION, 99, "", bad_probe, lambda: None)
    registry = BackendRegistry(plugins={"p": make_plugin(broken, spec("ok"))}, autoload=False)
    result = registry.probe("flaky")
    assert not result.available and "OSError: driver returned error 999" in result.reason
    assert registry.select("auto").name == "ok"


def test_a_hook_that_raises_marks_only_its_plugin_broken():
    @hookimpl
    def tgi_register_backends(register):
        raise RuntimeError("cannot enumerate devices")

    bad = types.SimpleNamespace(tgi_register_backends=tgi_register_backends)
    registry = BackendRegistry(plugins={"bad": bad, "good": make_plugin(spec("good"))}, autoload=False)
    assert registry.select("auto").name == "good"
    with pytest.raises(BackendSelectionError, match="RuntimeError: cannot enumerate devices"):
        registry.select("bad")


def test_duplicate_backend_names_are_refused():
    registry = BackendRegistry(
        plugins={"one": make_plugin(spec("dup")), "two": make_plugin(spec("dup"))}, autoload=False
    )
    errors = [e.error for e in registry.entries() if e.error]
    assert any("already registered by plugin 'one'" in e for e in errors)


@pytest.fixture
def broken_distribution(tmp_path, monkeypatch):
    """A real installed distribution whose entry point module raises on import."""
    (tmp_path / "tgi_broken_plugin.py").write_text(
        "raise ImportError('libmychip.so: cannot open shared object file')\n"
    )
    dist = tmp_path / "tgi_broken_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tgi-broken-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[tgi.backends]\nmychip = tgi_broken_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return "mychip"


def test_a_plugin_whose_import_raises_is_reported_with_the_reason(broken_distribution):
    registry = BackendRegistry(allow=["cpu", broken_distribution])
    assert set(registry.names()) == {"cpu", "mychip"}
    with pytest.raises(BackendSelectionError) as info:
        registry.select("mychip")
    assert "failed to import" in str(info.value) and "libmychip.so" in str(info.value)
    assert registry.select("auto").name == "cpu"  # the broken plugin does not break the others


def test_foreign_plugins_are_ignored_unless_asked_for(broken_distribution, monkeypatch):
    assert BackendRegistry().names() == ["cpu"]  # conftest's TGI_PLUGINS=cpu
    monkeypatch.delenv("TGI_PLUGINS")
    assert "mychip" in BackendRegistry().names()  # with no allow-list, every installed plugin loads
    monkeypatch.setenv("TGI_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert BackendRegistry().names() == []


def test_every_hook_is_documented():
    hooks = [f for name, f in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("tgi_")]
    assert hooks
    for hook in hooks:
        doc = inspect.getdoc(hook) or ""
        params = list(inspect.signature(hook).parameters)
        assert len(doc) > 200, f"{hook.__name__} needs a real docstring"
        for param in params:
            assert f":param {param}:" in doc, f"{hook.__name__} does not document its parameter {param}"
        assert "return" in doc.lower(), f"{hook.__name__} must say what the host does with its result"


def test_in_tree_plugin_module_has_no_hardware_imports_at_import_time():
    code = textwrap.dedent(
        """
        import sys
        import tgi.backends.cpu.plugin
        assert "torch" not in sys.modules, "registering a backend must not import torch"
        """
    )
    import subprocess

    subprocess.run([sys.executable, "-c", code], check=True)


def test_attention_selection_is_explicit_and_never_falls_back():
    from tgi.backends.cpu.backend import CpuBackend
    from tgi.core.interfaces import UnsupportedError

    backend = CpuBackend()
    backend.select_attention("cpu-sdpa")
    with pytest.raises(
        UnsupportedError,
        match=r"backend 'cpu' has no attention 'flash-attn' \(available: cpu-native, cpu-sdpa\)",
    ):
        backend.select_attention("flash-attn")
