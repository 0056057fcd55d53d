"""The out-of-tree example backend, installed as a real package, is discovered and selected by name."""

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


def test_auto_prefers_cpu_over_the_lower_priority_example(example_site):
    out = run_tgi(["backends"], example_site, allow="cpu,example")
    assert out.returncode == 0, out.stderr
    assert "selected (auto): cpu" in out.stdout


def test_unknown_backend_fails_naming_the_known_ones(example_site):
    out = run_tgi(["backends", "--backend", "nosuch"], example_site, allow="cpu,example")
    assert out.returncode == 2
    assert "unknown backend 'nosuch' (known backends: cpu, example" in out.stderr


def test_example_backend_instantiates(example_site):
    code = (
        "from tgi.core.plugins import BackendRegistry\n"
        "b = BackendRegistry().select('example').create()\n"
        "print(b.name, b.default_dtype(), b.attention().name)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(example_site), TGI_PLUGINS="example")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["example", "float32", "example-naive"]
