"""TGI launcher environment variables that this server has no flag for yet: each one set is named in a
warning at start-up, never silently ignored."""

from __future__ import annotations

import os

# TGI's launcher variables without a counterpart here (those with one are read by `tgi launch` itself)
UNSERVED = (
    "SHARDED", "SPECULATE", "KV_CACHE_DTYPE", "TRUST_REMOTE_CODE", "MAX_WAITING_TOKENS",
    "WAITING_SERVED_RATIO", "CUDA_GRAPHS", "PROMETHEUS_PORT", "SHARD_UDS_PATH", "WEIGHTS_CACHE_OVERRIDE",
    "DISABLE_CUSTOM_KERNELS", "CUDA_MEMORY_FRACTION", "ROPE_SCALING", "ROPE_FACTOR", "OTLP_ENDPOINT",
    "OTLP_SERVICE_NAME", "CORS_ALLOW_ORIGIN", "WATERMARK_GAMMA", "WATERMARK_DELTA", "TOKENIZER_CONFIG_PATH",
    "LORA_ADAPTERS", "ENABLE_PREFILL_LOGPROBS", "VALIDATION_WORKERS",
    "NGROK",
)  # fmt: skip


def unserved_variables(environ: dict[str, str] | None = None) -> list[str]:
    """The TGI launcher variables set (non-empty) in `environ` that this server does not act on."""
    env = os.environ if environ is None else environ
    return [name for name in UNSERVED if env.get(name, "") != ""]


def warning(names: list[str]) -> str:
    return (
        f"ignoring TGI launcher environment variable(s) this server does not implement: {', '.join(names)} "
        "(see `tgi launch --help` for what it takes)"
    )
