"""`--model-id` given more than once: every value kept in order (the first the engine's, the default), the
variables of the pool's flags read as Ollama's, and what cannot go with several models refused by name
before anything loads."""

from __future__ import annotations

import pytest
from launch_args import parse_launch_args as parse

from tgi.core.config import ConfigError
from tgi.server.cli.launch import engine_config, server_settings
from tgi.server.flags.derived import model_ids, served_models

VARIABLES = (
    "MODEL_ID",
    "MODELS_DIR",
    "MAX_LOADED_MODELS",
    "OLLAMA_MAX_LOADED_MODELS",
    "KEEP_ALIVE",
    "OLLAMA_KEEP_ALIVE",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_every_model_id_is_kept_in_order_and_the_first_is_the_engines():
    args = parse(
        ["--model-id", "owner/a-GGUF:Q4_K_M", "--model-id", "/models/b,c", "--max-loaded-models", "1"]
    )
    assert model_ids(args) == ("owner/a-GGUF:Q4_K_M", "/models/b,c")  # a value is whole: no comma split
    assert engine_config(args).model_id == "owner/a-GGUF:Q4_K_M"
    settings = server_settings(args)
    assert (settings.max_loaded_models, settings.keep_alive_s) == (1, 300.0)


def test_the_pools_variables_take_ollamas_durations_and_ollamas_own_are_not_read(monkeypatch):
    monkeypatch.setenv("MAX_LOADED_MODELS", "2")
    monkeypatch.setenv("KEEP_ALIVE", "1h30m")
    settings = server_settings(parse(["--model-id", "a/b", "--model-id", "c/d"]))
    assert (settings.max_loaded_models, settings.keep_alive_s) == (2, 5400.0)
    # a shell set up for Ollama does not stop a server of one model, nor change a server of several
    for name in ("MAX_LOADED_MODELS", "KEEP_ALIVE"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("OLLAMA_MAX_LOADED_MODELS", "3")
    monkeypatch.setenv("OLLAMA_KEEP_ALIVE", "10m")
    assert server_settings(parse(["--model-id", "a/b"])).max_loaded_models == 0
    settings = server_settings(parse(["--model-id", "a/b", "--model-id", "c/d"]))
    assert (settings.max_loaded_models, settings.keep_alive_s) == (0, 300.0)


@pytest.mark.parametrize(
    "argv, refused",
    [
        (["--model-id", "a/b", "--model-id", "a/b"], "two models are named a/b"),
        (
            [
                "--model-id",
                "a/b",
                "--model-id",
                "c/d",
                "--enable-model-swap",
                "--admin-api-key",
                "k",
                "--swappable-models",
                "e/f",
            ],
            "--enable-model-swap cannot go",
        ),
        (
            [
                "--model-id",
                "a/b",
                "--model-id",
                "c/d",
                "--nnodes",
                "2",
                "--master-addr",
                "10.0.0.1",
                "--num-shard",
                "2",
            ],
            "--nnodes cannot go",
        ),
        (["--model-id", "a/b", "--max-loaded-models", "1"], "--max-loaded-models needs several --model-id"),
        (["--model-id", "a/b", "--keep-alive", "1m"], "--keep-alive needs several --model-id"),
        (
            ["--model-id", "a/b", "--model-id", "c/d", "--max-loaded-models", "-1"],
            "--max-loaded-models must be",
        ),
    ],
)
def test_what_cannot_go_with_several_models_is_refused_by_name(argv, refused):
    with pytest.raises(ConfigError, match=refused):
        server_settings(parse(argv))


def test_a_malformed_keep_alive_is_refused_naming_the_flag(capsys):
    with pytest.raises(SystemExit):
        parse(["--keep-alive", "soon"])
    assert "--keep-alive" in capsys.readouterr().err


def test_a_models_dir_adds_its_models_after_the_model_ids(tmp_path):
    (tmp_path / "b.gguf").write_bytes(b"")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "config.json").write_text("{}")
    args = parse(["--model-id", "a/b", "--models-dir", str(tmp_path), "--max-loaded-models", "1"])
    assert served_models(args) == (
        ("a/b", "a/b"),
        ("b", str(tmp_path / "b.gguf")),
        ("c", str(tmp_path / "c")),
    )
    assert engine_config(args).model_id == "a/b"
    alone = parse(["--models-dir", str(tmp_path)])  # the folder's first model is the default
    assert engine_config(alone).model_id == str(tmp_path / "b.gguf")


@pytest.mark.parametrize("made, refused", [(False, "not a folder"), (True, "no model in it")])
def test_a_models_dir_without_models_is_refused_naming_it(tmp_path, made, refused):
    folder = tmp_path / "models"
    if made:
        folder.mkdir()
    with pytest.raises(ConfigError, match=f"--models-dir {folder}: {refused}"):
        server_settings(parse(["--models-dir", str(folder)]))
