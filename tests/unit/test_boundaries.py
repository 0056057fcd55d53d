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
    env = dict(os.environ)
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
    """A plain `tgi` tree (no package-dir) with every package the contracts name, where `importer` imports
    `imported`, and the real pyproject.toml beside it. Returns the folder to put on PYTHONPATH."""
    src = tmp_path / "src"
    modules = {"tgi.core", "tgi.backends", "tgi.server"}
    for contract in CONTRACTS.values():
        for key in ("source_modules", "forbidden_modules", "modules"):
            modules.update(contract.get(key, []))
    for module in modules:
        folder = src.joinpath(*module.split("."))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text('"""A stand-in."""\n')
    module_file = src.joinpath(*importer.split(".")).with_suffix(".py")
    module_file.write_text(f"import {imported}\n")
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
    ],
)
def test_a_forbidden_import_breaks_its_contract(tmp_path, importer, imported, contract):
    src = _fake_tree(tmp_path, importer, imported)
    out = _lint_imports(tmp_path, pythonpath=src)
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"{CONTRACTS[contract]['name']} BROKEN" in out.stdout
    assert f"{importer} -> {imported}" in out.stdout
    assert f"Contracts: {len(CONTRACTS) - 1} kept, 1 broken." in out.stdout
