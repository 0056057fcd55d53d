"""The launcher's operator flags: who may call the operator routes (`/admin/*`, `/v1/load_lora_adapter`,
`/v1/unload_lora_adapter`) and what those routes may do.

- `--admin-api-key` (ADMIN_API_KEY): the only key the operator routes accept; distinct from `--api-key`,
  which opens the inference routes only (and never the operator ones).
- `--enable-model-swap` (ENABLE_MODEL_SWAP), `--swappable-models` (SWAPPABLE_MODELS), `--swap-trust-remote-code`
  (SWAP_TRUST_REMOTE_CODE): `POST /admin/model` is served only when enabled, only for the listed models when a
  list is given, and a swapped-in model's own code runs only with the last one.
- `--lora-root` (LORA_ROOT), `--max-loras` (MAX_LORAS), `--max-lora-rank` (MAX_LORA_RANK): a run-time
  `lora_path` must lie inside the root; no more adapters served at once, nor of a larger rank.

`add_operator_arguments` registers them; `operator_settings` checks them together with
`--allow-runtime-lora-updating` (a `ConfigError` naming the flags) and returns the `ServerSettings` fields
they set; `operator_engine_settings` the `EngineConfig` fields.
"""

from __future__ import annotations

import argparse
import os

from tgi.core.config import DEFAULT_MAX_LORA_RANK, DEFAULT_MAX_LORAS, ConfigError
from tgi.server.launch_flags import env, on_off


def add_operator_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a(
        "--admin-api-key",
        default=os.environ.get("ADMIN_API_KEY"),  # as given: an empty key is refused
        help="the key the operator routes (/admin/*, /v1/load_lora_adapter, /v1/unload_lora_adapter) need as "
        "`Authorization: Bearer <key>`; they accept no other (not --api-key's), and this key opens no "
        "inference route; must differ from --api-key [env: ADMIN_API_KEY]",
    )
    a(
        "--enable-model-swap",
        type=on_off,
        nargs="?",
        const=True,
        default=env("ENABLE_MODEL_SWAP", default="false"),
        metavar="{true,false}",
        help="serve POST /admin/model (swap the served model); needs --admin-api-key; off by default "
        "[env: ENABLE_MODEL_SWAP]",
    )
    a(
        "--swappable-models",
        default=env("SWAPPABLE_MODELS"),
        help="comma-separated model ids / paths POST /admin/model may load (compared as written); default: "
        "any; needs --enable-model-swap [env: SWAPPABLE_MODELS]",
    )
    a(
        "--swap-trust-remote-code",
        type=on_off,
        nargs="?",
        const=True,
        default=env("SWAP_TRUST_REMOTE_CODE", default="false"),
        metavar="{true,false}",
        help="let a model loaded by POST /admin/model run its own code (--trust-remote-code never applies to "
        "swaps); needs --enable-model-swap [env: SWAP_TRUST_REMOTE_CODE]",
    )
    a(
        "--lora-root",
        default=env("LORA_ROOT"),
        help="folder under which POST /v1/load_lora_adapter may read adapters (its `lora_path`, symlinks "
        "followed, must lie inside); required by --allow-runtime-lora-updating [env: LORA_ROOT]",
    )
    a(
        "--max-loras",
        type=int,
        default=int(env("MAX_LORAS", default=DEFAULT_MAX_LORAS)),
        help="LoRA adapters served at once, --lora-adapters' and run-time loads together (vLLM's flag "
        f"counts adapters in one batch); default {DEFAULT_MAX_LORAS} [env: MAX_LORAS]",
    )
    a(
        "--max-lora-rank",
        type=int,
        default=int(env("MAX_LORA_RANK", default=DEFAULT_MAX_LORA_RANK)),
        help=f"largest rank `r` of a served LoRA adapter; default {DEFAULT_MAX_LORA_RANK} [env: MAX_LORA_RANK]",
    )


def _models(value: str | None) -> tuple[str, ...]:
    return tuple(m.strip() for m in (value or "").split(",") if m.strip())


def operator_settings(args: argparse.Namespace) -> dict:
    """The `ServerSettings` fields of these flags; `ConfigError` naming the flags that do not go together."""
    admin = args.admin_api_key
    if admin is not None and not admin.strip():
        raise ConfigError("--admin-api-key (or ADMIN_API_KEY) is empty: give a key, or leave it unset")
    if admin is not None and admin == args.api_key:
        raise ConfigError("--admin-api-key must differ from --api-key: every inference client holds that one")
    if args.enable_model_swap and admin is None:
        raise ConfigError(
            "--enable-model-swap needs --admin-api-key (the only key POST /admin/model accepts)"
        )
    swappable = _models(args.swappable_models)
    if args.swappable_models is not None and not swappable:
        raise ConfigError("--swappable-models is empty: list model ids, or leave it unset")
    for flag, value in (
        ("--swappable-models", swappable),
        ("--swap-trust-remote-code", args.swap_trust_remote_code),
    ):
        if value and not args.enable_model_swap:
            raise ConfigError(f"{flag} needs --enable-model-swap")
    root = None
    if args.allow_runtime_lora_updating:
        if admin is None:
            raise ConfigError(
                "--allow-runtime-lora-updating needs --admin-api-key (the only key the LoRA routes accept)"
            )
        if args.lora_root is None:
            raise ConfigError(
                "--allow-runtime-lora-updating needs --lora-root (the folder run-time adapters are read from)"
            )
    if args.lora_root is not None:
        if not args.allow_runtime_lora_updating:
            raise ConfigError(
                "--lora-root needs --allow-runtime-lora-updating (it bounds run-time loads only)"
            )
        root = os.path.realpath(args.lora_root)
        if not os.path.isdir(root):
            raise ConfigError(f"--lora-root {args.lora_root}: not a folder")
    return {
        "admin_api_key": admin,
        "enable_model_swap": args.enable_model_swap,
        "swappable_models": swappable,
        "swap_trust_remote_code": args.swap_trust_remote_code,
        "lora_root": root,
    }


def operator_engine_settings(args: argparse.Namespace) -> dict:
    """The `EngineConfig` fields of these flags (checked there)."""
    return {"max_loras": args.max_loras, "max_lora_rank": args.max_lora_rank}


def runtime_lora_warning(lora_root: str) -> str:
    """The start-up warning of a server with the run-time LoRA routes on."""
    return (
        "--allow-runtime-lora-updating: clients holding the admin key can make this server read adapter files "
        f"under {lora_root} and change what every client gets"
    )
