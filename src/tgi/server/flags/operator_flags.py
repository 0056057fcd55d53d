"""The table's operator flags: who may call the operator routes (`/admin/*`, `/v1/load_lora_adapter`,
`/v1/unload_lora_adapter`) and what those routes may do. Which of them need which others is checked in
`tgi.server.flags.checks`."""

from __future__ import annotations

from tgi.server.flags import derived, value_checks
from tgi.server.flags.parsers import comma_list
from tgi.server.flags.spec import Flag, Server

#: seconds a swapped-out model's requests get to finish (`--swap-drain-timeout`)
DEFAULT_SWAP_DRAIN_TIMEOUT_S = 60.0

OPERATOR = "operator routes"
ADMIN = ("--admin-api-key", "admin")
SWAPPABLE = ("--swappable-models", "a/b")
SWAP = ("--enable-model-swap", *SWAPPABLE, *ADMIN)

OPERATOR_FLAGS = (
    Flag(
        ("--admin-api-key",),
        "the key the operator routes (/admin/*, /v1/load_lora_adapter, /v1/unload_lora_adapter) need as "
        "`Authorization: Bearer <key>`; they accept no other (not --api-key's), and this key opens no "
        "inference route; must differ from --api-key",
        OPERATOR,
        Server("admin_api_key"),
        env=("ADMIN_API_KEY",),
        keep_empty_env=True,  # an empty key is refused
        check=value_checks.key("ADMIN_API_KEY", "give a key, or leave it unset"),
        example="admin",
    ),
    Flag(
        ("--enable-model-swap",),
        "serve POST /admin/model (swap the served model); needs --admin-api-key and --swappable-models; off "
        "by default",
        OPERATOR,
        Server("enable_model_swap"),
        env=("ENABLE_MODEL_SWAP",),
        kind="optional-switch",
        default="false",
        example="true",
        example_needs=(*SWAPPABLE, *ADMIN),
    ),
    Flag(
        ("--swappable-models",),
        "comma-separated model ids / paths POST /admin/model may load (compared as written); no other is "
        "loaded, so --enable-model-swap needs it",
        OPERATOR,
        Server("swappable_models"),
        env=("SWAPPABLE_MODELS",),
        parse=comma_list,
        check=value_checks.model_list,
        example="a/b, /models/c",
        example_needs=("--enable-model-swap", *ADMIN),
    ),
    Flag(
        ("--swap-trust-remote-code",),
        "let a model loaded by POST /admin/model run its own code (--trust-remote-code never applies to "
        "swaps); needs --enable-model-swap",
        OPERATOR,
        Server("swap_trust_remote_code"),
        env=("SWAP_TRUST_REMOTE_CODE",),
        kind="optional-switch",
        default="false",
        example="true",
        example_needs=SWAP,
    ),
    Flag(
        ("--swap-drain-timeout",),
        "seconds the requests in flight on a model swapped out (POST /admin/model) may take to finish; past "
        "it they end with an error that says so, streams included, and the old model is freed (0: at once); "
        f"default: {DEFAULT_SWAP_DRAIN_TIMEOUT_S:g}",
        OPERATOR,
        Server("swap_drain_timeout_s"),
        env=("SWAP_DRAIN_TIMEOUT",),
        parse=float,
        default=DEFAULT_SWAP_DRAIN_TIMEOUT_S,
        check=value_checks.drain_time,
        example="2.5",
    ),
    Flag(
        ("--allow-runtime-lora-updating",),
        "serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's routes): adapters loaded and "
        "unloaded at run time, from under --lora-root, by callers holding --admin-api-key (both needed); off "
        "by default, as whoever calls them changes what the server runs",
        OPERATOR,
        Server("allow_runtime_lora_updating"),
        env=("ALLOW_RUNTIME_LORA_UPDATING", "VLLM_ALLOW_RUNTIME_LORA_UPDATING"),
        env_help="ALLOW_RUNTIME_LORA_UPDATING or vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING",
        kind="switch",
        default=False,
        example="true",
        example_needs=(*ADMIN, "--lora-root", "."),
    ),
    Flag(
        ("--lora-root",),
        "folder under which POST /v1/load_lora_adapter may read adapters (its `lora_path`, symlinks followed, "
        "must lie inside); required by --allow-runtime-lora-updating",
        OPERATOR,
        Server("lora_root", derive=derived.lora_root),
        env=("LORA_ROOT",),
        example=".",
        example_needs=(*ADMIN, "--allow-runtime-lora-updating"),
    ),
)
