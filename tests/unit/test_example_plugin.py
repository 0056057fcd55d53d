"""The out-of-tree example backend, installed as a real package, is discovered and selected by name: once by the
`tgi` command in a process of its own, the other checks in this process with the package's folder put on
`sys.path` (the same entry-point discovery, without starting Python and importing torch again for each)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tgi-backend-example"


@pytest.fixture(scope="module")
def example_site(tmp_path_factory):
    """`pip install` the example into a folder of its own, outside the project's environment."""
    target = tmp_path_factory.mktemp("example-site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(EXAMPLE)],
        check=True,
    )  # fmt: skip
    return target


def run_tgi(args, site, allow=None):
    env = dict(os.environ, PYTHONPATH=str(site))
    env.pop("TGI_PLUGINS", None)
    if allow:
        env["TGI_PLUGINS"] = allow
    return subprocess.run(
        [sys.executable, "-m", "tgi.server.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_tgi_backends_lists_and_selects_the_example(example_site):
    out = run_tgi(["backends", "--backend", "example"], example_site, allow="cpu,example")
    assert out.returncode == 0, out.stderr
    lines = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
    assert "example" in lines and "yes" in lines["example"].split()
    assert "cpu" in lines and "yes" in lines["cpu"].split()
    assert "selected (example): example" in out.stdout


@pytest.fixture
def example_here(example_site, monkeypatch, capsys):
    """Run `tgi <args>` in this process with the example's folder on `sys.path`, only `allow`'s plugins
    allowed: its exit code, stdout and stderr."""
    monkeypatch.syspath_prepend(str(example_site))

    def run(args, allow="cpu,example"):
        from tgi.server.cli.main import main

        monkeypatch.setenv("TGI_PLUGINS", allow)
        capsys.readouterr()
        try:
            code = main(args)
        except SystemExit as exc:
            code = exc.code
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def test_auto_prefers_cpu_over_the_lower_priority_example(example_here):
    code, out, err = example_here(["backends"])
    assert code == 0, err
    assert "example" in out and "selected (auto): cpu" in out


def test_unknown_backend_fails_naming_the_known_ones(example_here):
    code, _, err = example_here(["backends", "--backend", "nosuch"])
    assert code == 2
    assert "unknown backend 'nosuch' (known backends: cpu, example" in err


def test_example_backend_instantiates(example_here, monkeypatch):
    from tgi.core.plugins import BackendRegistry

    monkeypatch.setenv("TGI_PLUGINS", "example")  # only the example is allowed
    b = BackendRegistry().select("example").create()
    assert [b.name, str(b.default_dtype()), b.attention().name] == ["example", "float32", "example-naive"]
