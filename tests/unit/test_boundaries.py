"""The import boundaries of pyproject.toml's import-linter contracts hold, and a forbidden import breaks them.

`make lint` runs `lint-imports`; these tests check that the contracts are the ones we promise, that the tree
keeps them, and that each of them fails on a tree that imports what it forbids.
"""

from __future__ import annotations

import ast
import os
import pathlib
import re
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


def _fake_tree(tmp_path: pathlib.Path, forbidden: list[tuple[str, str]]) -> pathlib.Path:
    """A `tgi` tree of empty packages: every package the contracts name, the imports
    their `ignore_imports` allow, and each (importer, imported) of `forbidden`; the real pyproject.toml beside
    it. Returns the folder to put on PYTHONPATH."""
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
    for importer, imported in forbidden:
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


#: the contracts that keep a docstring's "no torch here": every module each one names breaks it by importing
#: torch (and, where the contract forbids it, numpy)
TORCH_FREE = {cid: c for cid, c in CONTRACTS.items() if "torch" in c.get("forbidden_modules", [])}
TORCH_FREE_CASES = [
    (module, imported, cid)
    for cid, contract in TORCH_FREE.items()
    if cid != "interfaces-framework-free"  # its cases are listed below
    for module in contract["source_modules"]
    for imported in ("torch", "numpy")
    if imported in contract["forbidden_modules"]
]


#: each forbidden import, with the contract it breaks
FORBIDDEN_IMPORTS = [
    *TORCH_FREE_CASES,
    ("tgi.core.engine", "tgi.backends.cpu", "core-no-backend"),
    ("tgi.core.engine", "tgi.server", "core-no-server"),
    ("tgi.backends.rocm.backend", "tgi.backends.cuda", "backend-no-backend"),
    ("tgi.backends.triton_common.backend", "tgi.backends.cuda", "shared-no-backend"),
    ("tgi.backends.cpu.backend", "tgi.server", "backend-no-server"),
    ("tgi.core.interfaces.runner", "torch", "interfaces-framework-free"),
    ("tgi.core.interfaces.runner", "tgi.core.torch", "interfaces-framework-free"),
    ("tgi.backends.cpu.backend", "tgi.benchmarks", "no-benchmarks"),
]


def _report_sections(report: str) -> dict[str, str]:
    """lint-imports' report cut at its underlined headings (a broken contract's name, then its findings)."""
    lines = report.splitlines()
    heads = [i for i in range(1, len(lines)) if lines[i] and set(lines[i]) <= {"-", "="}]
    heads = [i for i in heads if len(lines[i]) == len(lines[i - 1])]
    ends = [i - 1 for i in heads[1:]] + [len(lines)]
    return {lines[i - 1]: "\n".join(lines[i + 1 : end]) for i, end in zip(heads, ends, strict=True)}


@requires_import_linter
def test_a_forbidden_import_breaks_its_contract(tmp_path):
    """Every forbidden import at once in one stand-in tree (one lint-imports run, not one per import): each is
    reported under the contract it breaks, each of those contracts is broken, and the others are kept."""
    src = _fake_tree(tmp_path, [(importer, imported) for importer, imported, _ in FORBIDDEN_IMPORTS])
    out = _lint_imports(tmp_path, pythonpath=src)
    assert out.returncode == 1, out.stdout + out.stderr
    sections = _report_sections(out.stdout)
    for importer, imported, contract in FORBIDDEN_IMPORTS:
        name = CONTRACTS[contract]["name"]
        assert f"{name} BROKEN" in out.stdout, contract
        assert f"{importer} -> {imported}" in sections.get(name, ""), (importer, imported, contract)
    broken = len({contract for _, _, contract in FORBIDDEN_IMPORTS})
    assert f"Contracts: {len(CONTRACTS) - broken} kept, {broken} broken." in out.stdout


#: modules checked by importing them: what importing each one must not load. Those that claim only that
#: importing them loads no torch (their functions import it) can be checked only so.
FREE_AT_IMPORT = {
    "tgi.core.interfaces": ("torch", "jax"),
    "tgi.core.interfaces.sampling": ("torch", "jax"),
    "tgi.core.testing.reference_sampler": ("torch", "jax"),
    "tgi.core.testing.sampling_cases": ("torch", "jax"),
    "tgi.core.validation": ("torch", "jax"),
    "tgi.core.parallel": ("torch", "jax"),
    "tgi.core.lora": ("torch", "jax"),
    "tgi.core.engine": ("torch", "jax"),  # its start-up module imports torch where it loads a model
    "tgi.core.async_engine": ("torch", "jax"),
    "tgi.core.loading.resolve": ("torch", "jax", "transformers", "huggingface_hub"),
}


@pytest.mark.parametrize("module", sorted(FREE_AT_IMPORT))
def test_the_framework_free_parts_import_no_framework(module):
    code = f"import sys, {module}; loaded = [m for m in {FREE_AT_IMPORT[module]!r} if m in sys.modules]; assert not loaded, loaded"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


#: how a module's docstring says it is free of torch
TORCH_FREE_CLAIM = re.compile(
    r"no torch|torch-free|without torch|imports? no framework|no framework here|does not import torch",
    re.IGNORECASE,
)
#: a claim about the module's own imports only (what it imports may load a framework): checked on its source
OWN_IMPORTS_CLAIM = re.compile(r"imports no framework itself", re.IGNORECASE)
FRAMEWORKS = ("torch", "jax")


def _claims() -> dict[str, tuple[pathlib.Path, str]]:
    """Every module under src/tgi/core/ (but tgi.core.torch) whose docstring claims it is free of torch: its file
    and its docstring on one line."""
    claims = {}
    for path in sorted((ROOT / "src" / "tgi" / "core").rglob("*.py")):
        relative = path.relative_to(ROOT / "src" / "tgi").with_suffix("")
        if relative.parts[:2] == ("core", "torch"):
            continue
        docstring = " ".join((ast.get_docstring(ast.parse(path.read_text())) or "").split())
        if TORCH_FREE_CLAIM.search(docstring):
            parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
            claims[".".join(("tgi", *parts))] = (path, docstring)
    return claims


def _kept_by_a_contract(module: str) -> bool:
    return any(
        module == source or module.startswith(source + ".")
        for contract in TORCH_FREE.values()
        for source in contract["source_modules"]
    )


def _imports_a_framework(path: pathlib.Path) -> list[str]:
    """The frameworks the module's own import statements name (at any depth, in functions too)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return [name for name in names if name.split(".")[0] in FRAMEWORKS]


def test_every_torch_free_claim_is_checked():
    """A docstring that says "no torch here" names a module that a torch-forbidding contract (or, for a
    claim about importing only, the import check above) keeps; one that claims only its own imports names no
    framework in them."""
    claims = _claims()
    assert "tgi.core.scheduler" in claims and "tgi.core.parallel" in claims  # the scan reads the claims
    unchecked, broken = [], []
    for module, (path, docstring) in claims.items():
        if OWN_IMPORTS_CLAIM.search(docstring):
            broken += [f"{module} imports {name}" for name in _imports_a_framework(path)]
        elif not _kept_by_a_contract(module) and module not in FREE_AT_IMPORT:
            unchecked.append(module)
    assert not unchecked, f"claim to be free of torch with no contract in pyproject.toml: {unchecked}"
    assert not broken, broken
