"""The watermark on the server: `parameters.watermark` reaches the engine with the launcher's gamma and delta
on every TGI generation route; `--watermark-gamma`/`--watermark-delta` out of range stop the start; and
`tgi watermark detect` prints one JSON line with the z-score."""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from fake_engine import FakeEngine
from tgi.core.config import ConfigError
from tgi.core.loading import resolve_model
from tgi.core.tokenization import load_tokenizer
from tgi.core.watermark import Watermark, detect_text
from tgi.server.app import create_app
from tgi.server.cli.launch import add_launch_arguments, server_settings
from tgi.server.service.settings import ServerSettings


@pytest.mark.parametrize("path", ["/generate", "/generate_stream", "/"])
def test_watermark_reaches_the_engine_with_the_servers_gamma_and_delta(path):
    engine = FakeEngine()
    mark = Watermark(0.25, 3.0)
    with TestClient(create_app(engine, ServerSettings(watermark=mark))) as c:
        for flag in (True, False):
            body = {"inputs": "Hi", "parameters": {"max_new_tokens": 2, "watermark": flag}}
            assert c.post(path, json=body).status_code == 200
    assert [params.watermark for _, params in engine.requests] == [mark, None]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_launch_arguments(parser)
    return parser.parse_args(list(argv))


def test_watermark_flags_and_their_range(monkeypatch):
    monkeypatch.delenv("WATERMARK_GAMMA", raising=False)
    monkeypatch.delenv("WATERMARK_DELTA", raising=False)
    assert server_settings(_args()).watermark == Watermark(0.5, 2.0)  # TGI's defaults
    assert server_settings(
        _args("--watermark-gamma", "0.3", "--watermark-delta", "4")
    ).watermark == Watermark(0.3, 4.0)
    monkeypatch.setenv("WATERMARK_DELTA", "1.5")
    assert server_settings(_args()).watermark.delta == 1.5
    for argv in (["--watermark-gamma", "1.0"], ["--watermark-delta", "0"]):
        with pytest.raises(ConfigError, match="--watermark"):
            server_settings(_args(*argv))


def test_detect_command_prints_a_json_line_with_the_z_score():
    """The real command on the default model's tokenizer (no model weights are loaded)."""
    text = "The quick brown fox jumps over the lazy dog. " * 3
    out = subprocess.run(
        [sys.executable, "-m", "tgi.server.cli.main", "watermark", "detect"],
        input=text,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    tokenizer = load_tokenizer(resolve_model(None))
    assert result == detect_text(text, tokenizer).as_dict()  # the Python function's answer
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert result["num_tokens_scored"] == len(set(itertools.pairwise(ids))) < len(ids) - 1
    assert abs(result["z_score"]) < 4


@pytest.mark.parametrize(
    "argv",
    [["--watermark-gamma", "2"], ["--watermark-delta", "-1"], ["--otlp-endpoint", "collector:4318"]],
)
def test_bad_production_flags_stop_the_start_before_the_model_loads(argv, capsys):
    from tgi.server.cli.launch import run_launch

    assert run_launch(_args(*argv, "--port", "0")) == 2
    assert argv[0] in capsys.readouterr().err
