"""The launcher's production flags: the watermark's `--watermark-gamma` / `--watermark-delta`,
OpenTelemetry's `--otlp-endpoint` / `--otlp-service-name`, each read from TGI's environment variable, and
`--swap-drain-timeout` (`SWAP_DRAIN_TIMEOUT`: how long a swapped-out model's requests may take to finish).

`add_production_arguments` runs before `tgi.server.launch_flags.add_tgi_arguments`, so these definitions win
over any refusal there; `production_settings` checks them (a `ConfigError` naming the flag) and returns the
`ServerSettings` fields they set.
"""

from __future__ import annotations

import argparse
import math

from tgi.core.config import ConfigError
from tgi.core.watermark import DEFAULT_DELTA, DEFAULT_GAMMA, Watermark
from tgi.server.launch_flags import env

#: seconds a swapped-out model's requests get to finish (`--swap-drain-timeout`)
DEFAULT_SWAP_DRAIN_TIMEOUT_S = 60.0


#: seconds one send of a streamed response may take (`--stream-write-timeout`)
DEFAULT_STREAM_WRITE_TIMEOUT_S = 30.0


def add_production_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a(
        "--watermark-gamma",
        type=float,
        default=float(env("WATERMARK_GAMMA", default=DEFAULT_GAMMA)),
        help="share of the vocabulary in each green list of requests with `watermark: true`, in (0, 1) "
        "[env: WATERMARK_GAMMA]",
    )
    a(
        "--watermark-delta",
        type=float,
        default=float(env("WATERMARK_DELTA", default=DEFAULT_DELTA)),
        help="added to the green tokens' logits of requests with `watermark: true`, > 0 [env: WATERMARK_DELTA]",
    )
    a(
        "--otlp-endpoint",
        default=env("OTLP_ENDPOINT"),
        help="OpenTelemetry collector that receives a trace per request: OTLP over gRPC (e.g. "
        "http://localhost:4317, as TGI), or over HTTP for port 4318 or a /v1/traces path (or as "
        "OTEL_EXPORTER_OTLP_PROTOCOL says); default: no tracing [env: OTLP_ENDPOINT]",
    )
    a(
        "--swap-drain-timeout",
        type=float,
        default=float(env("SWAP_DRAIN_TIMEOUT", default=DEFAULT_SWAP_DRAIN_TIMEOUT_S)),
        help="seconds the requests in flight on a model swapped out (POST /admin/model) may take to finish; "
        "past it they end with an error that says so, streams included, and the old model is freed (0: at "
        f"once); default: {DEFAULT_SWAP_DRAIN_TIMEOUT_S:g} [env: SWAP_DRAIN_TIMEOUT]",
    )
    a(
        "--otlp-service-name",
        default=env("OTLP_SERVICE_NAME", default="text-generation-inference.router"),
        help="the service.name of the traces [env: OTLP_SERVICE_NAME]",
    )
    a(
        "--stream-write-timeout",
        type=float,
        default=float(env("STREAM_WRITE_TIMEOUT", default=DEFAULT_STREAM_WRITE_TIMEOUT_S)),
        help="seconds one event of a streamed response may wait for the client to read it; past it the "
        "request is cancelled and its slot and KV blocks freed (a client that stopped reading), > 0; "
        f"default: {DEFAULT_STREAM_WRITE_TIMEOUT_S:g} [env: STREAM_WRITE_TIMEOUT]",
    )


def production_settings(args: argparse.Namespace) -> dict:
    """The `ServerSettings` fields of these flags; `ConfigError` naming a flag out of range."""
    mark = Watermark(args.watermark_gamma, args.watermark_delta)
    try:
        mark.validate()
    except ValueError as exc:
        raise ConfigError(f"--watermark-gamma / --watermark-delta: {exc}") from None
    if args.otlp_endpoint is not None and not args.otlp_endpoint.startswith(("http://", "https://")):
        raise ConfigError(f"--otlp-endpoint must be an http:// or https:// URL, got {args.otlp_endpoint!r}")
    if args.otlp_endpoint is not None and not _otel_installed(args.otlp_endpoint):  # before the model loads
        raise ConfigError("--otlp-endpoint needs the OpenTelemetry SDK and exporter: pip install 'tgi[otel]'")
    write_timeout = args.stream_write_timeout
    if not 0 < write_timeout < float("inf"):
        raise ConfigError(f"--stream-write-timeout must be a number of seconds > 0, got {write_timeout}")
    drain = args.swap_drain_timeout
    if not math.isfinite(drain) or drain < 0:
        raise ConfigError(f"--swap-drain-timeout must be a number of seconds >= 0, got {drain}")
    return {
        "swap_drain_timeout_s": drain,
        "stream_write_timeout_s": write_timeout,
        "watermark": mark,
        "otlp_endpoint": args.otlp_endpoint,
        "otlp_service_name": args.otlp_service_name,
    }


def _otel_installed(endpoint: str) -> bool:
    import importlib.util

    from tgi.server.tracing import exporter_module, otlp_protocol

    try:
        return all(
            importlib.util.find_spec(m) is not None
            for m in ("opentelemetry.sdk.trace", exporter_module(otlp_protocol(endpoint)))
        )
    except ModuleNotFoundError:  # a parent package is missing
        return False
