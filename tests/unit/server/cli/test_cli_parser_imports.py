"""Building the `tgi` command's parser (what `tgi --help`, `tgi models list` and every command do before they
start) imports neither torch nor transformers: those cost seconds, and only the commands that run a model
import them, when they run."""

from __future__ import annotations

import subprocess
import sys


def test_the_parser_of_every_command_imports_no_torch_and_no_transformers():
    code = (
        "import sys\n"
        "from tgi.server.cli.main import build_parser\n"
        "build_parser()\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'jax') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
