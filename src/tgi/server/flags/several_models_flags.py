"""The table's flags of a server of several models (`--model-id` given more than once:
`tgi.server.served_models`): how many are loaded at once, and how long an idle one stays."""

from __future__ import annotations

from tgi.server.flags.model_flags import MODEL
from tgi.server.flags.parsers import keep_alive
from tgi.server.flags.spec import LAUNCHER, Flag, Server

SEVERAL_MODELS_FLAGS = (
    Flag(
        ("--models-dir",),
        "serve every model of this folder beside the `--model-id`s: each `.gguf` file by its name without "
        "`.gguf`, each sub-folder with a `config.json` by the folder's name (read once, at start)",
        MODEL,
        LAUNCHER,
        env=("MODELS_DIR",),
        example=".",
    ),
    Flag(
        ("--max-loaded-models",),
        "with several `--model-id`s: at most this many loaded at once, the least recently used idle one "
        "unloaded to load another (0: as many as memory holds)",
        MODEL,
        Server("max_loaded_models"),
        env=("MAX_LOADED_MODELS",),
        parse=int,
        at_least=0,
        default=0,
        example="1",
        example_needs=("--model-id", "a/b", "--model-id", "c/d"),
    ),
    Flag(
        ("--keep-alive",),
        "with several `--model-id`s: a model idle this long is unloaded (seconds or a duration such as "
        "`5m`, Ollama's; negative: kept loaded; Ollama's per-request `keep_alive` sets it for its model)",
        MODEL,
        Server("keep_alive_s"),
        env=("KEEP_ALIVE",),
        parse=keep_alive,
        default="5m",
        example="10m",
        example_needs=("--model-id", "a/b", "--model-id", "c/d"),
    ),
)
