"""The rest of TGI's launcher flags (issue 23): each either served with TGI's meaning or refused at start-up
with a message naming it, never accepted and ignored. Each flag defaults to its environment variable, named
in `tgi launch --help`.

`add_tgi_arguments(parser)` adds them (a flag another module already defines is left to it: a refusal
here gives way to the implementation); `check_tgi_arguments(args)` raises `ConfigError` for the first
refused or contradictory one; `apply_tgi_arguments(args)` does what must happen before the model loads.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from dataclasses import dataclass

from tgi.core.config import ConfigError


def env(*names: str, default=None):
    """The first of `names` set (non-empty) in the environment, else `default`."""
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            return value
    return default


def on_off(value) -> bool:
    """An on/off value: true/false, 1/0, yes/no, on/off (any case); anything else is an error."""
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def batch_sizes(value: str) -> tuple[int, ...]:
    """`--cuda-graphs`: comma-separated batch sizes; "0" (or nothing) turns graphs off: ()."""
    try:
        sizes = tuple(int(v) for v in str(value).split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected batch sizes such as 1,2,4,8, got {value!r}") from None
    if any(s < 0 for s in sizes):
        raise argparse.ArgumentTypeError(f"batch sizes must be >= 0, got {value!r}")
    return tuple(sorted({s for s in sizes if s > 0}))


@dataclass(frozen=True)
class Refused:
    """A TGI flag this server does not serve: why, and the value that asks for nothing (None: any value
    given is refused)."""

    flag: str
    why: str
    kind: type | str = str  # str, int, float, or "switch" (a flag without a value)
    neutral: object = None


# TGI's flags that are refused by name when given (another issue may implement one: the launcher then
# defines the flag first and the refusal here gives way, as --speculate, --trust-remote-code,
# --lora-adapters, --watermark-* and --otlp-* did)
REFUSED = (
    Refused("kv-cache-dtype", "the KV cache is kept in the model's dtype; an FP8 cache is not supported"),
    Refused(
        "waiting-served-ratio",
        "the scheduler admits waiting requests at every step, as far as the token budget allows (TGI's "
        "behaviour with ratio 0)",
        float,
        0.0,
    ),
    Refused(
        "max-waiting-tokens",
        "the scheduler admits waiting requests at every step, as far as the token budget allows (TGI's "
        "behaviour with 0)",
        int,
        0,
    ),
    Refused("prometheus-port", "metrics are served at /metrics on --port", int),
    Refused("shard-uds-path", "the shards talk through torch.distributed, not gRPC sockets"),
    Refused("weights-cache-override", "use --huggingface-hub-cache, or give --model-id a local folder"),
    Refused("disable-custom-kernels", "choose the backend's kernels with --attention", "switch"),
    Refused("ngrok", "ngrok tunnelling is not supported", "switch"),
    Refused("ngrok-authtoken", "ngrok tunnelling is not supported"),
    Refused("ngrok-edge", "ngrok tunnelling is not supported"),
)


def _refused_dest(r: Refused) -> str:
    return "refused_" + r.flag.replace("-", "_")


def _env_name(flag: str) -> str:
    return flag.upper().replace("-", "_")


def add_tgi_arguments(parser: argparse.ArgumentParser) -> None:
    """TGI's flags beyond the core ones in `tgi.server.launcher`, served or refused by name."""
    taken = set(parser._option_string_actions)  # flags defined already (an implementation wins)

    def a(*names: str, **kwargs) -> None:
        if not taken.intersection(names):
            parser.add_argument(*names, **kwargs)

    a(
        "--sharded",
        type=on_off,
        default=env("SHARDED"),
        metavar="{true,false}",
        help="true: shard over --num-shard (> 1) processes; false: --num-shard must be 1 [env: SHARDED]",
    )
    a(
        "--validation-workers",
        type=int,
        default=int(env("VALIDATION_WORKERS", default=2)),
        help="threads that tokenize and template requests [env: VALIDATION_WORKERS]",
    )
    a(
        "--cuda-graphs",
        type=batch_sizes,
        default=env("CUDA_GRAPHS"),
        help="decode batch sizes to capture as graphs (e.g. 1,2,4,8), 0: off; backends that cannot capture "
        "graphs refuse sizes; default: the backend's [env: CUDA_GRAPHS]",
    )
    a(
        "--master-addr",
        default=env("MASTER_ADDR", default="127.0.0.1"),
        help="address of rank 0's torch.distributed rendezvous (--num-shard > 1); a non-loopback address "
        "makes the store reachable from the network [env: MASTER_ADDR]",
    )
    a(
        "--master-port",
        type=int,
        default=_int(env("MASTER_PORT")),
        help="port of that rendezvous, a TCP store bound to --master-addr only; default: a private file "
        "store on this host (or a free port of a non-loopback --master-addr) [env: MASTER_PORT]",
    )
    a(
        "--huggingface-hub-cache",
        default=env("HUGGINGFACE_HUB_CACHE", "HF_HUB_CACHE"),
        help="where hub models are downloaded and looked for [env: HUGGINGFACE_HUB_CACHE, HF_HUB_CACHE]",
    )
    a(
        "--cuda-memory-fraction",
        type=float,
        default=float(env("CUDA_MEMORY_FRACTION", default=1.0)),
        help="share of the device's total memory this server may use (weights, activations and KV cache) "
        "[env: CUDA_MEMORY_FRACTION]",
    )
    a(
        "--rope-scaling",
        choices=("linear", "dynamic"),
        default=env("ROPE_SCALING"),
        help="rescale rotary positions: linear (positions / --rope-factor) or dynamic (NTK; the same as plain "
        "RoPE within the model's context, which --max-total-tokens may not exceed) [env: ROPE_SCALING]",
    )
    a(
        "--rope-factor",
        type=float,
        default=_float(env("ROPE_FACTOR")),
        help="the rope scaling factor; alone it means linear scaling [env: ROPE_FACTOR]",
    )
    a(
        "--cors-allow-origin",
        action="append",
        default=None,
        help="an origin whose browser pages may call the API (repeat, or comma-separated; * for any); "
        "default: no CORS headers [env: CORS_ALLOW_ORIGIN]",
    )
    a(
        "--tokenizer-config-path",
        default=env("TOKENIZER_CONFIG_PATH"),
        help="a tokenizer_config.json whose chat_template replaces the model's [env: TOKENIZER_CONFIG_PATH]",
    )
    a(
        "--enable-prefill-logprobs",
        action="store_true",
        default=on_off(env("ENABLE_PREFILL_LOGPROBS", default="false")),
        help="allow requests to ask for the prompt tokens' logprobs (decoder_input_details, echo with "
        "logprobs); off: they get a 422 [env: ENABLE_PREFILL_LOGPROBS]",
    )
    a(
        "--usage-stats",
        choices=("on", "off", "no-stack"),
        default=env("USAGE_STATS", default="on").lower(),
        help="accepted for TGI's command lines: this server never sends usage statistics anywhere, "
        "whatever the value [env: USAGE_STATS]",
    )
    a("-e", "--env", action="store_true", help="print the runtime environment (versions, platform) first")
    a("-V", "--version", action="version", version=_version())
    for r in REFUSED:  # under a dest of their own: a flag defined elsewhere is not checked here
        name, dest = f"--{r.flag}", _refused_dest(r)
        var = _env_name(r.flag)
        text = f"refused: {r.why} [env: {var}]"
        if r.kind == "switch":
            a(name, dest=dest, action="store_true", default=on_off(env(var, default="false")), help=text)
        else:
            raw = env(var)
            a(name, dest=dest, type=r.kind, default=None if raw is None else r.kind(raw), help=text)


def check_tgi_arguments(args: argparse.Namespace) -> None:
    """`ConfigError` naming the first refused flag given, or a contradiction between these flags."""
    for r in REFUSED:
        value = getattr(args, _refused_dest(r), None)
        if value in (None, False) or (r.neutral is not None and value == r.neutral):
            continue
        shown = "" if r.kind == "switch" else f" {value}"
        raise ConfigError(f"--{r.flag}{shown} ({_env_name(r.flag)}) is not supported: {r.why}")
    if args.sharded is True and args.num_shard < 2:
        raise ConfigError(
            "--sharded true needs --num-shard > 1 (this server does not count the devices for you)"
        )
    if args.sharded is False and args.num_shard != 1:
        raise ConfigError(f"--sharded false contradicts --num-shard {args.num_shard}")
    if args.validation_workers < 1:
        raise ConfigError(f"--validation-workers must be >= 1, got {args.validation_workers}")
    if not 0 < args.cuda_memory_fraction <= 1:
        raise ConfigError(f"--cuda-memory-fraction must be in (0, 1], got {args.cuda_memory_fraction}")
    if args.rope_factor is not None and args.rope_factor <= 0:
        raise ConfigError(f"--rope-factor must be > 0, got {args.rope_factor}")
    if args.tokenizer_config_path is not None:
        tokenizer_config(args.tokenizer_config_path)  # readable, with a chat template


def rope_scaling(args: argparse.Namespace) -> tuple[str, float] | None:
    """(type, factor) as TGI reads the two flags: a factor alone is linear, a type alone has factor 1."""
    if args.rope_scaling is None and args.rope_factor is None:
        return None
    return (args.rope_scaling or "linear", args.rope_factor if args.rope_factor is not None else 1.0)


def cors_origins(args: argparse.Namespace) -> tuple[str, ...]:
    given = args.cors_allow_origin or [env("CORS_ALLOW_ORIGIN", default="")]
    return tuple(o.strip() for value in given for o in value.split(",") if o.strip())


def tokenizer_config(path: str) -> dict:
    """The JSON at `path` (`--tokenizer-config-path`); `ConfigError` if it cannot be read or has no
    `chat_template` (the one thing this server takes from it)."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--tokenizer-config-path {path}: {exc}") from None
    if not isinstance(config, dict) or not config.get("chat_template"):
        raise ConfigError(f"--tokenizer-config-path {path}: no chat_template in it")
    return config


def apply_hub_cache(path: str | None) -> None:
    """`--huggingface-hub-cache`: where huggingface_hub downloads and looks (this process, and the shard
    processes it starts, which read the variable)."""
    if not path:
        return
    os.environ["HF_HUB_CACHE"] = os.environ["HUGGINGFACE_HUB_CACHE"] = path
    hub = sys.modules.get("huggingface_hub.constants")
    if hub is not None:  # imported already: its constant was read from the old environment
        hub.HF_HUB_CACHE = hub.HUGGINGFACE_HUB_CACHE = path


def environment_report() -> str:
    """`--env`: what a bug report needs about this machine."""
    import importlib.metadata as md

    lines = [f"Platform: {platform.platform()}", f"Python: {sys.version.split()[0]}"]
    for dist in ("tgi", "torch", "transformers", "tokenizers", "huggingface-hub", "triton", "jax"):
        try:
            lines.append(f"{dist}: {md.version(dist)}")
        except md.PackageNotFoundError:
            continue
    try:
        import torch

        if torch.cuda.is_available():
            lines.append(
                f"GPUs: {', '.join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))}"
            )
    except ImportError:
        pass
    return "\n".join(lines)


def _version() -> str:
    from tgi.server import __version__

    return f"tgi {__version__}"


def _int(value) -> int | None:
    return None if value is None else int(value)


def _float(value) -> float | None:
    return None if value is None else float(value)
