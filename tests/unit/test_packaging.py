"""The repository's folders install as the `tgi` import package."""

from __future__ import annotations

import ast
import fnmatch
import pathlib

import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAPPING = {  # the src layout: each package's folder under src/
    "src/tgi/core": "tgi.core",
    "src/tgi/backends": "tgi.backends",
    "src/tgi/server": "tgi.server",
    "src/tgi/benchmarks": "tgi.benchmarks",
}


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


def _package_folder(package: str) -> pathlib.Path:
    for folder, prefix in MAPPING.items():
        if package == prefix or package.startswith(prefix + "."):
            return ROOT.joinpath(folder, *package.split(".")[prefix.count(".") + 1 :])
    raise AssertionError(f"{package} is outside the mapped folders")


def _glob_matches(relative: str, pattern: str) -> bool:
    """setuptools' package-data globbing: a pattern is relative to the package's folder and `*` stays within
    one folder."""
    parts, pattern_parts = relative.split("/"), pattern.split("/")
    return len(parts) == len(pattern_parts) and all(map(fnmatch.fnmatchcase, parts, pattern_parts))


def test_every_native_source_is_package_data():
    """A non-editable install ships the Python modules and only what [tool.setuptools.package-data] matches:
    the C++ files the CPU kernels are compiled from at first use must all be matched."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    patterns = [
        (_package_folder(package), pattern)
        for key, key_patterns in setuptools.get("package-data", {}).items()
        for package in (sorted(listed) if key in ("*", "") else [key])
        if package in listed
        for pattern in key_patterns
    ]
    sources = sorted(p for p in (ROOT / "src" / "tgi" / "backends").rglob("*") if p.suffix in (".cpp", ".h"))
    assert any(p.name == "bindings.cpp" for p in sources), "the native kernels' sources moved?"
    unmatched = [
        str(source.relative_to(ROOT))
        for source in sources
        if not any(
            source.is_relative_to(folder) and _glob_matches(source.relative_to(folder).as_posix(), pattern)
            for folder, pattern in patterns
        )
    ]
    assert not unmatched, f"add these to [tool.setuptools.package-data] in pyproject.toml: {unmatched}"


def test_native_kernels_are_not_python_strings():
    """The kernels live as .cpp/.h files (real line numbers, C++ tooling), not as C++ source in Python modules."""
    leftovers = sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "src" / "tgi" / "backends").rglob("*_src.py")
    )
    assert not leftovers, leftovers


def test_no_backend_folder_is_empty():
    for folder in (ROOT / "src" / "tgi" / "backends").iterdir():
        if folder.is_dir() and folder.name != "__pycache__":
            modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
            assert modules, f"backends/{folder.name} is an empty backend"


def test_core_imports_no_backend():
    """Core reaches backends through the plugin host only (entry points), never by importing one."""
    offenders = []
    for path in (ROOT / "src" / "tgi" / "core").rglob("*.py"):
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
