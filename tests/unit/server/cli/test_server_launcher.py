"""`tgi launch` flags: TGI's names, environment variables and defaults; contradictions fail with exit 2."""

from __future__ import annotations

import gc
import re
import signal
import socket

import pytest
import uvicorn
from launch_args import parse_launch_args as parse

from fake_engine import FakeEngine
from tgi.core.config import ConfigError
from tgi.server.cli.launch import engine_config, run_launch, serve, server_settings
from tgi.server.flags.unserved import UNSERVED
from tgi.server.service.settings import ServerSettings

ENV = [
    "MODEL_ID", "REVISION", "TGI_BACKEND", "DTYPE", "NUM_SHARD", "QUANTIZE", "MAX_INPUT_TOKENS",
    "MAX_INPUT_LENGTH", "MAX_TOTAL_TOKENS", "MAX_BATCH_PREFILL_TOKENS", "MAX_BATCH_TOTAL_TOKENS",
    "MAX_CONCURRENT_REQUESTS", "MAX_BEST_OF", "MAX_STOP_SEQUENCES", "MAX_TOP_N_TOKENS", "HOSTNAME",
    "PORT", "API_KEY", "JSON_OUTPUT", "MAX_BATCH_SIZE", "SHUTDOWN_TIMEOUT", "MAX_CLIENT_BATCH_SIZE",
    "PAYLOAD_LIMIT", "PREFIX_CACHING", *UNSERVED,
]  # fmt: skip


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def test_defaults_are_tgis():
    a = parse([])
    assert (a.hostname, a.port, a.backend) == ("0.0.0.0", 3000, "auto")
    assert (a.max_concurrent_requests, a.max_best_of, a.max_stop_sequences, a.max_top_n_tokens) == (
        128,
        2,
        4,
        5,
    )
    assert a.model_id is None and a.api_key is None and a.json_output is False and a.num_shard == 1


def test_environment_variables(monkeypatch):
    env = {
        "MODEL_ID": "m", "REVISION": "r", "TGI_BACKEND": "cpu", "DTYPE": "bfloat16", "MAX_INPUT_LENGTH": "100",
        "MAX_TOTAL_TOKENS": "200", "MAX_BATCH_PREFILL_TOKENS": "300", "MAX_BATCH_TOTAL_TOKENS": "4000",
        "MAX_CONCURRENT_REQUESTS": "7", "MAX_BEST_OF": "3", "MAX_STOP_SEQUENCES": "6", "MAX_TOP_N_TOKENS": "9",
        "HOSTNAME": "127.0.0.1", "PORT": "8080", "API_KEY": "k", "JSON_OUTPUT": "true",
    }  # fmt: skip
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    a = parse([])
    c = engine_config(a)
    assert (c.model_id, c.revision, c.backend, c.dtype) == ("m", "r", "cpu", "bfloat16")
    assert (c.max_input_tokens, c.max_total_tokens, c.max_batch_prefill_tokens, c.max_batch_total_tokens) == (
        100, 200, 300, 4000,
    )  # fmt: skip
    s = server_settings(a)
    assert (s.max_concurrent_requests, s.max_best_of, s.max_stop_sequences, s.max_top_n_tokens) == (
        7,
        3,
        6,
        9,
    )
    assert (a.hostname, a.port, s.api_key, a.json_output) == ("127.0.0.1", 8080, "k", True)
    monkeypatch.setenv("MAX_INPUT_TOKENS", "150")  # the current name wins over the legacy one
    assert parse([]).max_input_tokens == 150
    assert parse(["--max-input-length", "50"]).max_input_tokens == 50  # flags win over the environment


def test_prefix_caching_is_on_unless_turned_off_by_flag_or_variable(monkeypatch, capsys):
    assert engine_config(parse([])).prefix_caching is True
    assert engine_config(parse(["--prefix-caching", "false"])).prefix_caching is False
    monkeypatch.setenv("PREFIX_CACHING", "0")  # TGI's variable
    assert engine_config(parse([])).prefix_caching is False
    assert engine_config(parse(["--prefix-caching", "true"])).prefix_caching is True
    with pytest.raises(SystemExit):
        parse(["--prefix-caching", "maybe"])
    assert "expected true or false, got 'maybe'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--max-input-tokens", "100", "--max-total-tokens", "100"],
            "--max-input-tokens (100) must be < --max-total-tokens",
        ),
        (
            ["--max-total-tokens", "5000", "--max-batch-total-tokens", "4000"],
            "--max-total-tokens (5000) must be <=",
        ),
        (
            ["--max-batch-prefill-tokens", "9000", "--max-batch-total-tokens", "4000"],
            "--max-batch-prefill-tokens",
        ),
        (["--quantize", "int3"], "--quantize int3: unknown value (one of: awq,"),
        (["--max-concurrent-requests", "0"], "--max-concurrent-requests must be >= 1"),
    ],
)
def test_contradictions_fail_at_start(capsys, argv, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        engine_config(parse(argv))
    assert run_launch(parse([*argv, "--port", "0", "--hostname", "127.0.0.1"])) == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_indivisible_shards_are_refused_at_start_with_the_reason(capsys):
    # the default model has 9 query and 3 key/value heads: 3 shards work, 2 cannot
    assert run_launch(parse(["--num-shard", "2", "--port", "0", "--hostname", "127.0.0.1"])) == 2
    err = capsys.readouterr().err
    assert "9 attention heads are not divisible by 2 shards" in err


def test_serve_freezes_the_loaded_objects_and_runs_uvicorns_loop(monkeypatch):
    """The objects alive at start are out of the collector's reach, and uvicorn runs with its own event
    loop choice (`Server.run`, uvloop when installed) on the launcher's socket."""
    calls = []

    def run(self, sockets=None):
        calls.append(("run", sockets, gc.get_freeze_count()))

    async def serve_on_asyncios_loop(self, sockets=None):
        calls.append(("serve", sockets, gc.get_freeze_count()))

    monkeypatch.setattr(uvicorn.Server, "run", run)
    monkeypatch.setattr(uvicorn.Server, "serve", serve_on_asyncios_loop)
    engine = FakeEngine()
    engine.error = None  # what `AsyncEngine` reports once stopped
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    with socket.socket() as sock:
        try:
            assert serve(engine, ServerSettings(), sock) == 0
        finally:
            gc.unfreeze()
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
    [(method, sockets, frozen)] = calls
    assert (method, sockets) == ("run", [sock]) and frozen > 0


def test_client_batch_size_and_payload_limit_flags(monkeypatch):
    s = server_settings(parse([]))
    assert (s.max_client_batch_size, s.payload_limit) == (4, 2_000_000)  # TGI's defaults
    monkeypatch.setenv("MAX_CLIENT_BATCH_SIZE", "8")
    monkeypatch.setenv("PAYLOAD_LIMIT", "1000")
    s = server_settings(parse([]))
    assert (s.max_client_batch_size, s.payload_limit) == (8, 1000)
    with pytest.raises(ConfigError, match="--payload-limit must be >= 1"):
        engine_config(parse(["--payload-limit", "0"]))


@pytest.mark.parametrize("how", ["flag", "env"])
def test_an_empty_api_key_is_refused(monkeypatch, capsys, how):
    if how == "env":
        monkeypatch.setenv("API_KEY", "")
        argv = []
    else:
        argv = ["--api-key", " "]
    with pytest.raises(ConfigError, match=r"--api-key .* is empty"):
        engine_config(parse(argv))
    assert run_launch(parse([*argv, "--port", "0", "--hostname", "127.0.0.1"])) == 2
    assert "is empty" in capsys.readouterr().err


def test_tgi_variables_without_a_flag_are_named_at_start(monkeypatch, capsys):
    from tgi.core.async_engine import AsyncEngine

    monkeypatch.setenv("PREFILL_CHUNKING", "0")
    monkeypatch.setenv("PAYLOAD_LIMIT", "5000")  # one we implement: not named

    def stop_after_the_warning(*_args, **_kwargs):
        raise ConfigError("stop here")

    monkeypatch.setattr(AsyncEngine, "from_config", stop_after_the_warning)
    assert run_launch(parse(["--port", "0", "--hostname", "127.0.0.1"])) == 2
    [warning] = [line for line in capsys.readouterr().err.splitlines() if "WARNING" in line]
    assert "does not implement: PREFILL_CHUNKING " in warning and "PAYLOAD_LIMIT" not in warning


def test_serve_ends_with_exit_1_when_the_engine_dies(monkeypatch):
    """A dead engine stops uvicorn (through `on_death`) and the process exits 1 with the cause logged."""
    engine = FakeEngine()
    engine.error = None
    engine.on_death = None

    def run(self, sockets=None):
        assert callable(engine.on_death) and not self.should_exit
        engine.error = RuntimeError("the engine thread died")
        engine.on_death(engine.error)  # as the engine thread calls it
        assert self.should_exit

    monkeypatch.setattr(uvicorn.Server, "run", run)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    with socket.socket() as sock:
        try:
            assert serve(engine, ServerSettings(), sock) == 1
        finally:
            gc.unfreeze()
            for sig, handler in handlers.items():
                signal.signal(sig, handler)


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (
            "--reasoning-parser=deepseek_r1",
            "--reasoning-parser deepseek_r1: this model's chat template never",
        ),
        ("--tool-call-parser=hermes", "--tool-call-parser hermes: this model's chat template does not teach"),
    ],
)
def test_a_parser_the_models_chat_template_cannot_have_is_refused_at_start(tmp_path, capsys, flag, message):
    from tgi.core.testing.tiny_models import save_random_model

    model = save_random_model(tmp_path / "model")  # its tokenizer has no chat template
    argv = [
        "--model-id",
        str(model),
        flag,
        "--port",
        "0",
        "--hostname",
        "127.0.0.1",
        "--max-total-tokens",
        "64",
    ]
    assert run_launch(parse([*argv, "--max-input-tokens", "32", "--max-batch-prefill-tokens", "64"])) == 2
    assert message in capsys.readouterr().err
