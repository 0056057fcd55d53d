"""Router-level limits and options (TGI's launcher flags that the engine does not see)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tgi.core.watermark import Watermark


@dataclass(frozen=True)
class ServerSettings:
    max_concurrent_requests: int = 128  # more in flight: 429 (TGI's default)
    max_best_of: int = 2
    max_stop_sequences: int = 4
    max_top_n_tokens: int = 5
    max_client_batch_size: int = 4  # sequences one request may ask for (prompts x `n`; TGI's default)
    payload_limit: int = 2_000_000  # request body bytes; more: 413 (TGI's default)
    disable_grammar_support: bool = False  # `grammar`, `response_format` and `tools` get a 422
    # the reasoning / tool-call parser named by --reasoning-parser / --tool-call-parser ("auto" or a format's
    # name: `tgi.server.reasoning`, `tgi.server.tool_parsers`); None: none
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    # requests may bring their own `chat_template` and `documents` (--trust-request-chat-template)
    trust_request_chat_template: bool = False
    # prompt logprobs (`decoder_input_details`, `echo` with `logprobs`, `prompt_logprobs`) are computed only
    # with this on, as TGI's `--enable-prefill-logprobs` (they cost a [prompt, vocabulary] logits tensor)
    enable_prefill_logprobs: bool = False
    # origins whose browser pages may call the API (CORS); "*" is any; empty: no CORS headers
    cors_allow_origin: tuple[str, ...] = ()
    validation_workers: int = 2  # threads that tokenize and template requests (TGI's default)
    # images in requests (`tgi.server.images`): at most this many per request (--max-images-per-request), each
    # of at most this many pixels (--max-image-pixels); image URLs fetched only from public addresses, or only
    # from these hosts when set (--allowed-media-domains), on ports 80, 443 and these (--allowed-media-ports),
    # within this many seconds all told (--image-fetch-timeout); file: URLs only under this folder
    # (--allowed-local-media-path; None: refused)
    max_images_per_request: int = 4
    max_image_pixels: int = 4096 * 4096
    allowed_media_domains: tuple[str, ...] = ()
    allowed_media_ports: tuple[int, ...] = ()
    image_fetch_timeout_s: float = 5.0
    allowed_local_media_path: str | None = None
    api_key: str | None = None  # when set, every route but /health needs `Authorization: Bearer <key>`
    # (key, tenant) pairs of --api-key-file: more inference keys, each of its tenant (`tgi.server.http.auth`);
    # tenants share no prefix-cache blocks and see no other tenant's stored responses
    api_keys: tuple[tuple[str, str], ...] = ()
    model_id: str | None = None  # the name shown to clients; None: the engine's model id
    start_engine: bool = True  # call `engine.start()` / `engine.shutdown()` in the app's lifespan
    shutdown_grace_s: float = 30.0  # in-flight requests get this long on SIGTERM, then are cancelled
    # gamma and delta of requests with `watermark: true` (TGI's --watermark-gamma, --watermark-delta)
    watermark: Watermark = field(default_factory=Watermark)
    otlp_endpoint: str | None = None  # OpenTelemetry collector (OTLP/HTTP); None: no tracing
    otlp_service_name: str = "text-generation-inference.router"  # the traces' service.name
    # POST /v1/load_lora_adapter and /v1/unload_lora_adapter are served (--allow-runtime-lora-updating)
    allow_runtime_lora_updating: bool = False
    # seconds one send of a streamed response may take (a client that stopped reading); past it the request
    # is cancelled and its slot and KV blocks freed (--stream-write-timeout)
    stream_write_timeout_s: float = 30.0
    # operator routes (/admin/*, the run-time LoRA routes) accept only this key (--admin-api-key); None: they
    # are refused; it opens no inference route (`tgi.server.http.auth`)
    admin_api_key: str | None = None
    # several `--model-id`s (`tgi.server.served_models.pool`): at most this many loaded (0: as memory holds),
    # and how long an idle one stays loaded (negative: until its place is needed)
    max_loaded_models: int = 0
    keep_alive_s: float = 300.0
    enable_model_swap: bool = False  # POST /admin/model is served (--enable-model-swap)
    swappable_models: tuple[str, ...] = ()  # the model ids a swap may load (--swappable-models); (): none
    swap_trust_remote_code: bool = False  # a swapped-in model's own code may run (--swap-trust-remote-code)
    # the real path run-time `lora_path`s must lie inside (--lora-root); None: no run-time load
    lora_root: str | None = None
    # seconds the requests admitted on a swapped-out model may take to finish; past it they end with an
    # error saying so, and the old model is freed (--swap-drain-timeout)
    swap_drain_timeout_s: float = 60.0
    # OpenAI Responses kept for GET /v1/responses/{id} and `previous_response_id` (`tgi.server.responses.store`):
    # at most this many (0: none; `store: true` is then refused), each for at most this many seconds, all of
    # them holding at most this many bytes (their JSON: data-URL images count)
    responses_store_max_entries: int = 1024
    responses_store_max_age_s: float = 3600.0
    responses_store_max_bytes: int = 64 * 2**20
    # how the queue is ordered (--scheduling-policy): "fcfs", or "priority" by the requests' `priority`
    scheduling_policy: str = "fcfs"
    on_ready: Callable[[], None] | None = None  # run once the app has started (the launcher's "serving" line)
