"""Destination values made of several flags, or not the flag's value as it is (`Engine.derive`,
`Server.derive` in the table)."""

from __future__ import annotations

import argparse
import os

from tgi.core.config import ConfigError
from tgi.core.watermark import Watermark


def rope_scaling(args: argparse.Namespace) -> tuple[str, float] | None:
    """(type, factor) as TGI reads the two flags: a factor alone is linear, a type alone has factor 1."""
    if args.rope_scaling is None and args.rope_factor is None:
        return None
    return (args.rope_scaling or "linear", args.rope_factor if args.rope_factor is not None else 1.0)


def served_models(args: argparse.Namespace) -> tuple[tuple[str, str], ...]:
    """(name, model id) of every model the server serves, the default first: each `--model-id` (`MODEL_ID`
    alone when none is), named by its value, then each model of `--models-dir`, named by its file or folder
    (`tgi.server.served_models.folder`); empty for the default model."""
    out = [(model_id, model_id) for model_id in args.model_id or ()]  # a tuple: the flag's kind is "repeat"
    folder = getattr(args, "models_dir", None)
    if folder is not None:
        from tgi.server.served_models.folder import models_in

        try:
            out += models_in(folder)
        except NotADirectoryError as exc:
            raise ConfigError(str(exc)) from None
    return tuple(out)


def model_ids(args: argparse.Namespace) -> tuple[str, ...]:
    """The model id of every model served (`served_models`), in order."""
    return tuple(model_id for _, model_id in served_models(args))


def first_model_id(args: argparse.Namespace) -> str | None:
    """The model the engine settings name: the default of a server of several (`served_models`)."""
    return next(iter(model_ids(args)), None)


def watermark(args: argparse.Namespace) -> Watermark:
    return Watermark(args.watermark_gamma, args.watermark_delta)


def lora_adapters(args: argparse.Namespace) -> tuple[tuple[str, str], ...]:
    from tgi.server.lora.adapters import parse_lora_adapters

    return parse_lora_adapters(args.lora_adapters)


def lora_root(args: argparse.Namespace) -> str | None:
    """The real path run-time adapters must lie inside (symlinks resolved)."""
    return None if args.lora_root is None else os.path.realpath(args.lora_root)


def api_keys(args: argparse.Namespace) -> tuple[tuple[str, str], ...] | None:
    """(key, tenant) pairs of --api-key-file (`ConfigError` for a file without keys, or one that holds
    --admin-api-key, which opens no inference route, or --api-key, whose tenant is made from it)."""
    if args.api_key_file is None:
        return None
    from tgi.server.http.auth import read_api_key_file

    pairs = read_api_key_file(args.api_key_file)
    for flag, given in (("--admin-api-key", args.admin_api_key), ("--api-key", args.api_key)):
        if given is not None and any(key == given for key, _ in pairs):
            raise ConfigError(f"{flag} must differ from every key of --api-key-file {args.api_key_file}")
    return pairs


def cors_origins(args: argparse.Namespace) -> tuple[str, ...]:
    return args.cors_allow_origin or ()
