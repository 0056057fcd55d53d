"""The import boundaries of pyproject.toml's import-linter contracts hold, and a forbidden import breaks them.

`make lint` runs `lint-imports`; these tests check that the contracts are the ones we promise, that the tree
keeps them, and that each of them fails on a tree that imports what it forbids.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())
CONTRACTS = {c["id"]: c for c in CONFIG["tool"]["importlinter"]["contracts"]}
LINT_IMPORTS = shutil.which("lint-imports", path=os.path.dirname(sys.executable))

requires_import_linter = pytest.mark.skipif(
    LINT_IMPORTS is None, reason="import-linter is not installed (it is in the dev extra)"
)


def _lint_imports(cwd: pathlib.Path, pythonpath: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")  # one line per contract in the report
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_four_boundaries_are_contracts():
    assert CONTRACTS["core-no-backend"]["forbidden_modules"] == ["tgi.backends"]
    assert CONTRACTS["core-no-server"]["forbidden_modules"] == ["tgi.server"]
    assert CONTRACTS["backend-no-server"]["source_modules"] == ["tgi.backends"]
    assert CONTRACTS["backend-no-server"]["forbidden_modules"] == ["tgi.server"]
    assert CONTRACTS["backend-no-backend"]["type"] == "independence"


def test_every_registered_backend_is_independent_of_the_others():
    """A new in-tree backend joins the independence contract when it registers its entry point."""
    entry_points = CONFIG["project"]["entry-points"]["tgi.backends"].values()
    packages = {module.rsplit(".", 1)[0] for module in entry_points}
    assert packages == set(CONTRACTS["backend-no-backend"]["modules"])
    # and a package the backends share is none of them, and imports none of them
    assert "tgi.backends.triton_common" not in packages
    assert set(CONTRACTS["shared-no-backend"]["forbidden_modules"]) == packages


@requires_import_linter
def test_the_tree_keeps_the_contracts():
    out = _lint_imports(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in out.stdout


def _fake_tree(tmp_path: pathlib.Path, importer: str, imported: str) -> pathlib.Path:
    """A plain `tgi` tree (no package-dir) of empty packages: every package the contracts name, the imports
    their `ignore_imports` allow, and `importer` importing `imported`; the real pyproject.toml beside it.
    Returns the folder to put on PYTHONPATH."""
    src = tmp_path / "src"
    imports: dict[str, list[str]] = {root: [] for root in CONFIG["tool"]["importlinter"]["root_packages"]}
    for contract in CONTRACTS.values():
        for key in ("source_modules", "forbidden_modules", "modules"):
            imports.update({m: [] for m in contract.get(key, []) if m.startswith("tgi.")})
    for contract in CONTRACTS.values():
        for rule in contract.get("ignore_imports", []):
            a, b = (m.strip() for m in rule.split("->"))
            imports.setdefault(a, []).append(b)
            imports.setdefault(b, [])
    imports.setdefault(importer, []).append(imported)
    for module, targets in imports.items():
        parts = module.split(".")
        for depth in range(2, len(parts) + 1):  # `tgi` itself stays a namespace package
            folder = src.joinpath(*parts[:depth])
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "__init__.py").touch()
        body = "".join(f"import {target}\n" for target in targets)
        src.joinpath(*parts, "__init__.py").write_text(f'"""A stand-in."""\n{body}')
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return src


@requires_import_linter
@pytest.mark.parametrize(
    ("importer", "imported", "contract"),
    [
        ("tgi.core.engine", "tgi.backends.cpu", "core-no-backend"),
        ("tgi.core.engine", "tgi.server", "core-no-server"),
        ("tgi.backends.rocm.backend", "tgi.backends.cuda", "backend-no-backend"),
        ("tgi.backends.triton_common.backend", "tgi.backends.cuda", "shared-no-backend"),
        ("tgi.backends.cpu.backend", "tgi.server", "backend-no-server"),
        ("tgi.core.interfaces.runner", "torch", "interfaces-framework-free"),
        ("tgi.core.interfaces.runner", "tgi.core.torch", "interfaces-framework-free"),
        ("tgi.backends.cpu.backend", "tgi.benchmarks", "no-benchmarks"),
    ],
)
def test_a_forbidden_import_breaks_its_contract(tmp_path, importer, imported, contract):
    src = _fake_tree(tmp_path, importer, imported)
    out = _lint_imports(tmp_path, pythonpath=src)
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"{CONTRACTS[contract]['name']} BROKEN" in out.stdout
    assert f"{importer} -> {imported}" in out.stdout
    assert f"Contracts: {len(CONTRACTS) - 1} kept, 1 broken." in out.stdout


@pytest.mark.parametrize(
    "module",
    [
        "tgi.core.interfaces",
        "tgi.core.interfaces.sampling",
        "tgi.core.testing.reference_sampler",
        "tgi.core.testing.sampling_cases",
        "tgi.core.validation",
    ],
)
def test_the_framework_free_parts_import_no_framework(module):
    code = (
        f"import sys, {module}; assert 'torch' not in sys.modules and 'jax' not in sys.modules, sys.modules"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_loading_has_no_import_cycles():
    """The format loaders import shared helpers (`selection`), never the dispatcher (`resolve`) that imports
    them; block weights are built outside the GGUF loader."""
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (the dev extra)")
    graph = grimp.build_graph("tgi.core", cache_dir=None)
    modules = sorted(m for m in graph.modules if m.startswith("tgi.core.loading"))
    cycles = [
        (a, b)
        for a in modules
        for b in modules
        if a < b and graph.chain_exists(a, b) and graph.chain_exists(b, a)
    ]
    assert not cycles, cycles
