"""The start-up checks of the flags: `check_flags(args)` raises `ConfigError` naming the first refused flag
given, the first value out of range (`Flag.at_least`, `Flag.check`), or the first flags that do not go
together (the checks below, which span several flags). Nothing is loaded before they pass."""

from __future__ import annotations

import argparse
import os

from tgi.core.config import ConfigError
from tgi.server.flags.spec import Flag
from tgi.server.flags.table import FLAGS


def check_flags(args: argparse.Namespace, flags: tuple[Flag, ...] = FLAGS) -> None:
    given = [f for f in flags if hasattr(args, f.dest)]
    for flag in given:
        _check_refused(flag, getattr(args, flag.dest))
    for flag in given:
        _check_value(flag, getattr(args, flag.dest))
    check_sharding(args)
    check_watermark(args)
    check_operator_flags(args)
    check_several_models(args)


def check_several_models(args: argparse.Namespace) -> None:
    """`--model-id` given more than once, or `--models-dir` (`tgi.server.served_models`): distinct names, and none of the flags
    that hold one model's resources for the server's life; the pool's own flags only with several."""
    from tgi.server.flags.derived import served_models

    if not hasattr(args, "model_id"):
        return
    models = served_models(args)  # (a --models-dir that is no folder is refused there)
    folder = getattr(args, "models_dir", None)
    if folder is not None:
        from tgi.server.served_models.folder import models_in

        if not models_in(folder):
            raise ConfigError(
                f"--models-dir {folder}: no model in it (a .gguf file, or a folder with a config.json)"
            )
    ids = [name for name, _ in models]
    if len(ids) < 2:
        if getattr(args, "max_loaded_models", 0):
            raise ConfigError("--max-loaded-models needs several --model-id (the models it chooses between)")
        if getattr(args, "keep_alive", 300.0) != 300.0:
            raise ConfigError("--keep-alive needs several --model-id: a server of one model keeps it loaded")
        return
    twice = next((m for m in ids if ids.count(m) > 1), None)
    if twice is not None:
        raise ConfigError(
            f"two models are named {twice} (--model-id, --models-dir): each is served by its name"
        )
    events = getattr(args, "kv_events_config", None)
    for given, flag in (
        (getattr(args, "enable_model_swap", False), "--enable-model-swap"),
        (events is not None and events.publishes, "--kv-events-config"),
        (getattr(args, "nnodes", 1) > 1, "--nnodes"),
        (getattr(args, "tokenizer_config_path", None), "--tokenizer-config-path"),
    ):
        if given:
            raise ConfigError(
                f"{flag} cannot go with several --model-id: it holds one model's resources (a swap, the event "
                "sockets, a group of hosts, a chat template) for the server's life"
            )


def _check_refused(flag: Flag, value) -> None:
    refusal = flag.refusal
    if (
        refusal is None
        or value in (None, False)
        or (refusal.neutral is not None and value == refusal.neutral)
    ):
        return
    shown = "" if flag.kind == "switch" else f" {value}"
    raise ConfigError(f"{flag.name}{shown} ({flag.env[0]}) is not supported: {refusal.why}")


def _check_value(flag: Flag, value) -> None:
    if value is None:
        return
    if flag.at_least is not None and value < flag.at_least:
        raise ConfigError(f"{flag.name} must be >= {flag.at_least}, got {value}")
    problem = flag.check(value) if flag.check is not None else None
    if problem is not None:
        raise ConfigError(f"{flag.name} {problem}")


def check_sharding(args: argparse.Namespace) -> None:
    if args.sharded is True and args.num_shard < 2:
        raise ConfigError(
            "--sharded true needs --num-shard > 1 (this server does not count the devices for you)"
        )
    if args.sharded is False and args.num_shard != 1:
        raise ConfigError(f"--sharded false contradicts --num-shard {args.num_shard}")
    if args.nnodes > 1 and args.master_addr is None:
        raise ConfigError(
            f"--nnodes {args.nnodes} needs --master-addr (MASTER_ADDR, or LeaderWorkerSet's LWS_LEADER_ADDRESS): "
            "node 0's address, where its rendezvous store listens and every node joins"
        )
    if args.headless and args.nnodes < 2:
        raise ConfigError("--headless needs --nnodes > 1: it runs a node other than 0 of a multi-host group")
    if args.headless and args.node_rank == 0:
        raise ConfigError(
            "--headless with --node-rank 0: node 0 holds rank 0 and serves HTTP; give 1 or more"
        )
    if args.node_rank > 0 and not args.headless:
        raise ConfigError(
            f"--node-rank {args.node_rank} needs --headless: only node 0 serves HTTP, the others follow its steps"
        )


def check_watermark(args: argparse.Namespace) -> None:
    from tgi.server.flags.derived import watermark

    try:
        watermark(args).validate()
    except ValueError as exc:
        raise ConfigError(f"--watermark-gamma / --watermark-delta: {exc}") from None


def check_operator_flags(args: argparse.Namespace) -> None:
    """The operator routes' flags: each needs the ones that make it safe (an admin key, a LoRA root)."""
    admin = args.admin_api_key
    if admin is not None and admin == args.api_key:
        raise ConfigError("--admin-api-key must differ from --api-key: every inference client holds that one")
    if args.enable_model_swap and admin is None:
        raise ConfigError(
            "--enable-model-swap needs --admin-api-key (the only key POST /admin/model accepts)"
        )
    events = getattr(args, "kv_events_config", None)
    if args.enable_model_swap and events is not None and events.publishes:
        raise ConfigError(
            "--kv-events-config cannot go with --enable-model-swap: the model swapped in would open the event "
            "sockets while the model it replaces still holds them"
        )
    if args.enable_model_swap and not args.swappable_models:
        raise ConfigError(
            "--enable-model-swap needs --swappable-models (the model ids / paths POST /admin/model may load: "
            "none unless named)"
        )
    for flag, value in (
        ("--swappable-models", args.swappable_models),
        ("--swap-trust-remote-code", args.swap_trust_remote_code),
    ):
        if value and not args.enable_model_swap:
            raise ConfigError(f"{flag} needs --enable-model-swap")
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
        if not os.path.isdir(os.path.realpath(args.lora_root)):
            raise ConfigError(f"--lora-root {args.lora_root}: not a folder")
