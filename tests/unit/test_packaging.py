"""The repository's folders install as the `tgi` import package."""

from __future__ import annotations

import ast
import pathlib

import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAPPING = {"core": "tgi.core", "backends": "tgi.backends", "server": "tgi.server"}


def test_every_python_package_folder_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = set()
    for folder, package in MAPPING.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *rel.parts]))
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - found == set(), "these listed packages have no folder"


def test_no_backend_folder_is_empty():
    for folder in (ROOT / "backends").iterdir():
        if folder.is_dir() and folder.name != "__pycache__":
            modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
            assert modules, f"backends/{folder.name} is an empty backend"


def test_core_imports_no_backend():
    """Core reaches backends through the plugin host only (entry points), never by importing one."""
    offenders = []
    for path in (ROOT / "core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            offenders += [
                f"{path.relative_to(ROOT)}:{node.lineno} imports {name}"
                for name in names
                if name == "tgi.backends" or name.startswith("tgi.backends.")
            ]
    assert not offenders, offenders
