"""Every flag of TGI's documented launcher (`docs/source/reference/launcher.md` of text-generation-inference,
plus the two its 3.3 release added, `--prometheus-port` and `--graceful-termination-timeout`), kept here as
data: `tgi launch` takes each one and either serves it or refuses it at start-up with a message that names it;
`tgi launch --help` names each one's environment variable. Then what the served ones do."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from types import SimpleNamespace

import pytest
from launch_args import parse_launch_args as parse

from tgi.core.config import ConfigError, EngineConfig
from tgi.server import flags
from tgi.server.cli.launch import add_launch_arguments, engine_config, run_launch, server_settings
from tgi.server.flags import derived, launcher_actions

# (flag, environment variable or None, a value to give it or None for a switch, served here)
TGI_LAUNCHER_FLAGS = [
    ("--model-id", "MODEL_ID", "some/model", True),
    ("--revision", "REVISION", "main", True),
    ("--validation-workers", "VALIDATION_WORKERS", "3", True),
    ("--sharded", "SHARDED", "false", True),
    ("--num-shard", "NUM_SHARD", "1", True),
    ("--quantize", "QUANTIZE", "eetq", True),  # whether the model and backend serve it is decided at load
    ("--speculate", "SPECULATE", "2", None),  # served (n-gram prompt lookup)
    ("--dtype", "DTYPE", "bfloat16", True),
    ("--kv-cache-dtype", "KV_CACHE_DTYPE", "fp8_e4m3fn", True),  # the backend refuses what it cannot store
    ("--trust-remote-code", "TRUST_REMOTE_CODE", None, True),
    ("--max-concurrent-requests", "MAX_CONCURRENT_REQUESTS", "64", True),
    ("--max-best-of", "MAX_BEST_OF", "3", True),
    ("--max-stop-sequences", "MAX_STOP_SEQUENCES", "6", True),
    ("--max-top-n-tokens", "MAX_TOP_N_TOKENS", "7", True),
    ("--max-input-tokens", "MAX_INPUT_TOKENS", "100", True),
    ("--max-input-length", "MAX_INPUT_LENGTH", "100", True),
    ("--max-total-tokens", "MAX_TOTAL_TOKENS", "200", True),
    ("--waiting-served-ratio", "WAITING_SERVED_RATIO", "1.2", False),
    ("--max-batch-prefill-tokens", "MAX_BATCH_PREFILL_TOKENS", "300", True),
    ("--max-batch-total-tokens", "MAX_BATCH_TOTAL_TOKENS", "4000", True),
    ("--max-waiting-tokens", "MAX_WAITING_TOKENS", "20", False),
    ("--max-batch-size", "MAX_BATCH_SIZE", "8", True),
    ("--cuda-graphs", "CUDA_GRAPHS", "1,2,4", True),  # backends that cannot capture graphs refuse it at load
    ("--hostname", "HOSTNAME", "127.0.0.1", True),
    ("--port", "PORT", "8080", True),
    ("--prometheus-port", "PROMETHEUS_PORT", "9000", False),
    ("--shard-uds-path", "SHARD_UDS_PATH", "/tmp/tgi", False),
    ("--master-addr", "MASTER_ADDR", "localhost", True),
    ("--master-port", "MASTER_PORT", "29500", True),
    ("--huggingface-hub-cache", "HUGGINGFACE_HUB_CACHE", "/tmp/hub", True),
    ("--weights-cache-override", "WEIGHTS_CACHE_OVERRIDE", "/tmp/w", False),
    ("--disable-custom-kernels", "DISABLE_CUSTOM_KERNELS", None, False),
    ("--cuda-memory-fraction", "CUDA_MEMORY_FRACTION", "0.8", True),
    ("--rope-scaling", "ROPE_SCALING", "linear", True),
    ("--rope-factor", "ROPE_FACTOR", "2.0", True),
    ("--json-output", "JSON_OUTPUT", None, True),
    ("--otlp-endpoint", "OTLP_ENDPOINT", "http://collector:4318", True),
    ("--otlp-service-name", "OTLP_SERVICE_NAME", "tgi", True),
    ("--cors-allow-origin", "CORS_ALLOW_ORIGIN", "https://app.example", True),
    ("--api-key", "API_KEY", "secret", True),
    ("--watermark-gamma", "WATERMARK_GAMMA", "0.25", True),
    ("--watermark-delta", "WATERMARK_DELTA", "3.0", True),
    ("--ngrok", "NGROK", None, False),
    ("--ngrok-authtoken", "NGROK_AUTHTOKEN", "token", False),
    ("--ngrok-edge", "NGROK_EDGE", "edge", False),
    ("--tokenizer-config-path", "TOKENIZER_CONFIG_PATH", "TOKENIZER_CONFIG", True),
    ("--disable-grammar-support", "DISABLE_GRAMMAR_SUPPORT", None, True),
    ("--env", None, None, True),
    ("--max-client-batch-size", "MAX_CLIENT_BATCH_SIZE", "8", True),
    ("--lora-adapters", "LORA_ADAPTERS", "adapter=.", True),  # a local folder (read at load)
    ("--usage-stats", "USAGE_STATS", "off", True),
    ("--payload-limit", "PAYLOAD_LIMIT", "1000", True),
    ("--enable-prefill-logprobs", "ENABLE_PREFILL_LOGPROBS", None, True),
    ("--graceful-termination-timeout", "GRACEFUL_TERMINATION_TIMEOUT", "90", True),
]
ENV_NAMES = [e for _, e, _, _ in TGI_LAUNCHER_FLAGS if e] + ["HF_HUB_CACHE", "SHUTDOWN_TIMEOUT"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def chat_template_file(tmp_path):
    path = tmp_path / "tokenizer_config.json"
    path.write_text(json.dumps({"chat_template": "{{ messages[0]['content'] }}!"}))
    return str(path)


def _argv(flag: str, value: str | None, template: str) -> list[str]:
    if value is None:
        return [flag]
    return [flag, template if value == "TOKENIZER_CONFIG" else value]


@pytest.mark.parametrize(("flag", "variable", "value", "served"), TGI_LAUNCHER_FLAGS)
def test_each_documented_flag_is_served_or_refused_by_name(flag, variable, value, served, chat_template_file):
    args = parse(_argv(flag, value, chat_template_file))
    try:
        engine_config(args)
        server_settings(args)
    except ConfigError as exc:
        assert served is not True, f"{flag} is refused: {exc}"
        assert flag in str(exc), f"the refusal of {flag} does not name it: {exc}"
    else:
        assert served is not False, f"{flag} {value} was accepted, but this server does not serve it"


@pytest.mark.parametrize(
    ("flag", "variable", "value", "served"), [f for f in TGI_LAUNCHER_FLAGS if f[1] and f[0] != "--env"]
)
def test_each_flag_reads_its_environment_variable(
    monkeypatch, flag, variable, value, served, chat_template_file
):
    """The variable alone has the flag's effect: the same namespace value, or the same refusal."""
    by_flag = parse(_argv(flag, value, chat_template_file))
    monkeypatch.setenv(variable, "true" if value is None else _argv(flag, value, chat_template_file)[1])
    by_variable = parse([])
    dest = next(a.dest for a in _parser()._actions if flag in a.option_strings)
    if dest == "cors_allow_origin":  # repeatable: the variable is read where the origins are gathered
        assert derived.cors_origins(by_variable) == derived.cors_origins(by_flag)
    else:
        assert getattr(by_variable, dest) == getattr(by_flag, dest)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_launch_arguments(parser)
    return parser


def test_help_names_each_flag_and_its_variable():
    text = " ".join(_parser().format_help().split())
    for flag, variable, _, _ in TGI_LAUNCHER_FLAGS:
        assert re.search(rf"(^|[ ,]){re.escape(flag)}\b", text), f"{flag} is missing from --help"
        if variable:
            assert re.search(rf"\[env: [A-Z_, ]*\b{variable}\b", text), f"--help does not name {variable}"


def test_a_refused_flag_stops_the_launch_with_exit_2(capsys):
    assert run_launch(parse(["--ngrok-edge", "e", "--port", "0", "--hostname", "127.0.0.1"])) == 2
    assert "--ngrok-edge e (NGROK_EDGE) is not supported" in capsys.readouterr().err


def test_refused_flags_accept_the_values_that_ask_for_nothing(monkeypatch):
    # TGI's scheduling knobs at the values that mean what this scheduler does anyway; switches set false
    monkeypatch.setenv("DISABLE_CUSTOM_KERNELS", "false")
    engine_config(parse(["--waiting-served-ratio", "0", "--max-waiting-tokens", "0"]))


@pytest.mark.parametrize(
    ("argv", "variable", "expected"),
    [
        ([], None, False),
        (["--trust-remote-code"], None, True),
        ([], "true", True),
        ([], "1", True),
        ([], "false", False),
    ],
)
def test_trust_remote_code_reaches_the_engine_config(monkeypatch, argv, variable, expected):
    """TGI's --trust-remote-code (TRUST_REMOTE_CODE), off unless given: the engine loads a checkpoint's own
    code only with it (tests/integration/test_trust_remote_code.py)."""
    if variable is not None:
        monkeypatch.setenv("TRUST_REMOTE_CODE", variable)
    assert engine_config(parse(argv)).trust_remote_code is expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sharded", "true"], "--sharded true needs --num-shard > 1"),
        (["--sharded", "false", "--num-shard", "2"], "--sharded false contradicts --num-shard 2"),
        (["--validation-workers", "0"], "--validation-workers must be >= 1"),
        (["--cuda-memory-fraction", "1.5"], "--cuda-memory-fraction must be in (0, 1]"),
        (["--rope-factor", "0"], "--rope-factor must be > 0"),
        (["--tokenizer-config-path", "/nonexistent.json"], "--tokenizer-config-path /nonexistent.json"),
    ],
)
def test_served_flags_refuse_contradictions(argv, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        engine_config(parse(argv))


def test_served_flags_reach_the_engine_and_the_server(chat_template_file):
    args = parse(
        [
            "--sharded", "true", "--num-shard", "2", "--cuda-graphs", "4,1,2,0", "--rope-factor", "2",
            "--cuda-memory-fraction", "0.5", "--master-addr", "10.0.0.1", "--master-port", "29500",
            "--cors-allow-origin", "https://a.example,https://b.example", "--cors-allow-origin", "https://c",
            "--validation-workers", "3", "--enable-prefill-logprobs", "--graceful-termination-timeout", "90",
        ]
    )  # fmt: skip
    config = engine_config(args)
    assert (
        config.num_shard == 2 and config.cuda_graphs == (1, 2, 4) and config.rope_scaling == ("linear", 2.0)
    )
    assert (config.memory_fraction, config.master_addr, config.master_port) == (0.5, "10.0.0.1", 29500)
    settings = server_settings(args)
    assert settings.cors_allow_origin == ("https://a.example", "https://b.example", "https://c")
    assert (
        settings.validation_workers == 3
        and settings.enable_prefill_logprobs
        and settings.shutdown_grace_s == 90
    )
    assert engine_config(parse(["--cuda-graphs", "0"])).cuda_graphs == ()
    assert engine_config(parse([])).cuda_graphs is None
    assert engine_config(parse(["--rope-scaling", "dynamic"])).rope_scaling == ("dynamic", 1.0)


def test_cuda_graphs_are_refused_by_a_backend_that_cannot_capture_them():
    from tgi.core.engine import LLMEngine

    with pytest.raises(ConfigError, match="--cuda-graphs: the cpu backend does not capture graphs"):
        LLMEngine.from_config(EngineConfig(backend="cpu", cuda_graphs=(1, 2)))


def test_rope_scaling_replaces_the_checkpoints_own(tmp_path):
    import dataclasses

    import torch

    from tgi.core.loading import load_config, resolve_model
    from tgi.core.models.rotary import compute_inv_freq
    from tgi.core.testing.tiny_models import save_random_model

    save_random_model(tmp_path, "llama")
    source = resolve_model(str(tmp_path), None)
    plain, _ = compute_inv_freq(load_config(source))
    scaled, _ = compute_inv_freq(load_config(dataclasses.replace(source, rope_scaling=("linear", 4.0))))
    torch.testing.assert_close(scaled, plain / 4.0)
    dynamic, _ = compute_inv_freq(load_config(dataclasses.replace(source, rope_scaling=("dynamic", 2.0))))
    torch.testing.assert_close(dynamic, plain)  # NTK only rescales past the context this server allows


def test_memory_fraction_counts_what_is_used_against_the_total():
    from tgi.core.engine_startup import derive_limits
    from tgi.core.interfaces import MemoryInfo

    gib = 2**30
    spec = SimpleNamespace(bytes_per_block=gib // 64)
    runner = SimpleNamespace(
        kv_cache_spec=lambda: spec, memory_info=lambda: MemoryInfo(total=8 * gib, free=6 * gib)
    )
    info = SimpleNamespace(max_position_embeddings=256, dtype="float32")

    def kv_tokens(fraction: float) -> int:
        config = EngineConfig(memory_fraction=fraction, kv_cache_memory_fraction=1.0, max_num_seqs=10**6)
        return derive_limits(config, info, runner, None).max_batch_total_tokens

    # 2 GiB used of 8: with the whole device 6 GiB are left, with half of it 2 GiB
    assert kv_tokens(1.0) == 6 * 64 * 16 and kv_tokens(0.5) == 2 * 64 * 16
    with pytest.raises(ConfigError, match="less than --max-total-tokens"):
        kv_tokens(0.25)  # 2 GiB allowed, 2 GiB used: nothing left


def test_hub_cache_goes_to_huggingface_hub(monkeypatch, tmp_path):
    import huggingface_hub.constants as hub

    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):  # restored after the test
        monkeypatch.setattr(hub, name, getattr(hub, name))
        monkeypatch.setenv(name, "unset")
    launcher_actions.apply_hub_cache(str(tmp_path))
    assert (
        str(tmp_path) == hub.HF_HUB_CACHE == os.environ["HF_HUB_CACHE"] == os.environ["HUGGINGFACE_HUB_CACHE"]
    )


def test_version_and_env_and_usage_stats(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse(["-V"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("tgi ")
    report = launcher_actions.environment_report()
    assert f"Python: {sys.version.split()[0]}" in report and "torch: " in report
    assert parse(["--usage-stats", "no-stack"]).usage_stats == "no-stack"
    with pytest.raises(SystemExit):
        parse(["--usage-stats", "maybe"])


def test_a_flag_implemented_elsewhere_takes_the_place_of_its_refusal():
    """A parser that defines one of the table's flags itself keeps its definition: its values pass the checks."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--lora-adapters")
    parser.add_argument("--num-shard", type=int, default=1)
    flags.add_flags(parser)
    args = parser.parse_args(["--lora-adapters", "a/b"])
    flags.check_flags(args)
    assert args.lora_adapters == "a/b"
    with pytest.raises(ConfigError, match="--ngrok-edge e"):
        flags.check_flags(parser.parse_args(["--ngrok-edge", "e"]))
