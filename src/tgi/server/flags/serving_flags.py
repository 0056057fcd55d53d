"""The table's flags about serving: what one request may ask for, where and how the server listens, logs and
traces."""

from __future__ import annotations

from tgi.core.watermark import DEFAULT_DELTA, DEFAULT_GAMMA
from tgi.server.flags import derived, value_checks
from tgi.server.flags.parsers import comma_list, lower, port_list
from tgi.server.flags.spec import LAUNCHER, Flag, Server
from tgi.server.reasoning.formats import REASONING_PARSER_NAMES
from tgi.server.tool_parsers.registry import TOOL_CALL_PARSER_NAMES

#: seconds one send of a streamed response may take (`--stream-write-timeout`)
DEFAULT_STREAM_WRITE_TIMEOUT_S = 30.0

AS_TGI = "as TGI"
REQUESTS = "requests"
SERVER = "server"
WATERMARK = "the green-list share and bias of requests with `watermark: true`"
OTLP = (
    "a trace per request to that OpenTelemetry collector (OTLP over gRPC as TGI, or HTTP on port 4318; the "
    "`otel` extra)"
)

SERVING_FLAGS = (
    Flag(
        ("--max-concurrent-requests",),
        "more in flight get 429",
        REQUESTS,
        Server("max_concurrent_requests"),
        env=("MAX_CONCURRENT_REQUESTS",),
        parse=int,
        default=128,
        at_least=1,
        tgi=AS_TGI,
        example="64",
    ),
    Flag(
        ("--max-best-of",),
        "the largest `best_of` a request may ask for",
        REQUESTS,
        Server("max_best_of"),
        env=("MAX_BEST_OF",),
        parse=int,
        default=2,
        at_least=1,
        tgi=AS_TGI,
        example="3",
    ),
    Flag(
        ("--max-stop-sequences",),
        "the most stop sequences a request may give",
        REQUESTS,
        Server("max_stop_sequences"),
        env=("MAX_STOP_SEQUENCES",),
        parse=int,
        default=4,
        at_least=0,
        tgi=AS_TGI,
        example="6",
    ),
    Flag(
        ("--max-top-n-tokens",),
        "the most alternatives per token a request may ask for (`top_n_tokens`, OpenAI's `top_logprobs`)",
        REQUESTS,
        Server("max_top_n_tokens"),
        env=("MAX_TOP_N_TOKENS",),
        parse=int,
        default=5,
        at_least=0,
        tgi=AS_TGI,
        example="7",
    ),
    Flag(
        ("--max-client-batch-size",),
        "sequences one request may ask for (OpenAI's prompts x `n`)",
        REQUESTS,
        Server("max_client_batch_size"),
        env=("MAX_CLIENT_BATCH_SIZE",),
        parse=int,
        default=4,
        at_least=1,
        tgi=AS_TGI,
        example="8",
    ),
    Flag(
        ("--payload-limit",),
        "largest request body in bytes; larger: 413",
        REQUESTS,
        Server("payload_limit"),
        env=("PAYLOAD_LIMIT",),
        parse=int,
        default=2_000_000,
        at_least=1,
        tgi=AS_TGI,
        example="1000",
    ),
    Flag(
        ("--max-images-per-request",),
        "the most images one request may carry (vLLM's limit_mm_per_prompt); more: 422",
        REQUESTS,
        Server("max_images_per_request"),
        env=("MAX_IMAGES_PER_REQUEST",),
        parse=int,
        default=4,
        at_least=0,
        example="2",
    ),
    Flag(
        ("--max-image-pixels",),
        "the most pixels (width x height) of one image, read from its header before decoding; more: 422",
        REQUESTS,
        Server("max_image_pixels"),
        env=("MAX_IMAGE_PIXELS",),
        parse=int,
        default=4096 * 4096,
        at_least=1,
        example="1000000",
    ),
    Flag(
        ("--allowed-media-domains",),
        "the only hosts image URLs may name (vLLM's), whose private addresses are then allowed too; default: "
        "any host whose addresses are all public. Loopback, link-local, unspecified and multicast addresses "
        "are refused for every host",
        REQUESTS,
        Server("allowed_media_domains"),
        env=("ALLOWED_MEDIA_DOMAINS",),
        kind="list",
        parse=comma_list,
        example="images.example.com",
    ),
    Flag(
        ("--allowed-media-ports",),
        "ports image URLs may name beside 80 and 443 (the only ones by default)",
        REQUESTS,
        Server("allowed_media_ports"),
        env=("ALLOWED_MEDIA_PORTS",),
        kind="list",
        parse=port_list,
        example="8080",
    ),
    Flag(
        ("--image-fetch-timeout",),
        "seconds fetching one image URL may take, all told (connecting, headers, body, redirects; counted "
        "from when the request asked for it): past it the fetch is cut off and refused",
        REQUESTS,
        Server("image_fetch_timeout_s"),
        env=("IMAGE_FETCH_TIMEOUT",),
        parse=float,
        default=5.0,
        at_least=0.001,
        example="10",
    ),
    Flag(
        ("--allowed-local-media-path",),
        "the folder `file:` image URLs must lie in (symlinks followed); default: `file:` URLs refused",
        REQUESTS,
        Server("allowed_local_media_path"),
        env=("ALLOWED_LOCAL_MEDIA_PATH",),
        example=".",
    ),
    Flag(
        ("--disable-grammar-support",),
        "refuse `grammar`, `response_format` and `tools` with a 422",
        REQUESTS,
        Server("disable_grammar_support"),
        env=("DISABLE_GRAMMAR_SUPPORT",),
        kind="switch",
        default=False,
        tgi=AS_TGI,
        example="true",
    ),
    Flag(
        ("--reasoning-parser",),
        "split a reasoning model's thinking from its answer (`reasoning_content` on chat completions); guided "
        "decoding and tool grammars then apply to the answer only. auto: the format the chat template has, "
        "if any; a named one the template cannot have is refused at start; default: none (all is answer)",
        REQUESTS,
        Server("reasoning_parser"),
        env=("REASONING_PARSER",),
        choices=REASONING_PARSER_NAMES,
        example="auto",
    ),
    Flag(
        ("--tool-call-parser",),
        "read tool calls in the model's own format (vLLM's names) for `tool_choice: auto`, unconstrained; "
        "auto: the format the chat template teaches, if any; a named one the template does not teach is "
        "refused at start; default: none (a grammar constrains every call, for any model)",
        REQUESTS,
        Server("tool_call_parser"),
        env=("TOOL_CALL_PARSER",),
        choices=TOOL_CALL_PARSER_NAMES,
        example="auto",
    ),
    Flag(
        ("--enable-prefill-logprobs",),
        "allow requests to ask for the prompt tokens' logprobs (decoder_input_details, echo with logprobs, "
        "vLLM's prompt_logprobs); off: they get a 422",
        REQUESTS,
        Server("enable_prefill_logprobs"),
        env=("ENABLE_PREFILL_LOGPROBS",),
        kind="switch",
        default=False,
        tgi="as TGI: without it, `decoder_input_details`, `echo` with `logprobs` and `prompt_logprobs` are refused",
        example="true",
    ),
    Flag(
        ("--scheduling-policy",),
        "fcfs: requests run in arrival order and a request's `priority` other than 0 is refused by name; "
        "priority: a request's `priority` (vLLM's: lower runs first, 0 by default) orders the queue, arrival "
        "order within one priority",
        REQUESTS,
        Server("scheduling_policy"),
        env=("SCHEDULING_POLICY",),
        parse=lower,
        default="fcfs",
        choices=("fcfs", "priority"),
        example="priority",
    ),
    Flag(
        ("--validation-workers",),
        "threads that tokenize and template requests",
        REQUESTS,
        Server("validation_workers"),
        env=("VALIDATION_WORKERS",),
        parse=int,
        default=2,
        at_least=1,
        tgi="threads that tokenize and apply chat templates (default 2); `/info` shows it",
        example="3",
    ),
    Flag(
        ("--watermark-gamma",),
        "share of the vocabulary in each green list of requests with `watermark: true`, in (0, 1)",
        REQUESTS,
        Server("watermark", derive=derived.watermark),
        env=("WATERMARK_GAMMA",),
        parse=float,
        default=DEFAULT_GAMMA,
        tgi=WATERMARK,
        example="0.25",
    ),
    Flag(
        ("--watermark-delta",),
        "added to the green tokens' logits of requests with `watermark: true`, > 0",
        REQUESTS,
        Server("watermark", derive=derived.watermark),
        env=("WATERMARK_DELTA",),
        parse=float,
        default=DEFAULT_DELTA,
        tgi=WATERMARK,
        example="3.0",
    ),
    Flag(
        ("--hostname",),
        "the address to listen on",
        SERVER,
        LAUNCHER,
        env=("HOSTNAME",),
        default="0.0.0.0",
        tgi=AS_TGI,
        example="127.0.0.1",
    ),
    Flag(
        ("-p", "--port"),
        "the port to listen on (0: any free port)",
        SERVER,
        LAUNCHER,
        env=("PORT",),
        parse=int,
        default=3000,
        tgi=AS_TGI,
        example="8080",
    ),
    Flag(
        ("--api-key",),
        "require `Authorization: Bearer <key>` on every inference route (all but /health, /ping and the "
        "operator routes, which take --admin-api-key only)",
        SERVER,
        Server("api_key"),
        env=("API_KEY",),
        keep_empty_env=True,  # an empty key is refused, not read as "no auth"
        check=value_checks.key(
            "API_KEY",
            "that would serve without authentication; give a key, or leave it unset to serve without one",
        ),
        tgi=AS_TGI,
        example="secret",
    ),
    Flag(
        ("--api-key-file",),
        "a file of inference keys, one per line, each optionally followed by its tenant's name (`key "
        "tenant`; a key alone is a tenant of its own, named by a digest of it; `#` lines and blank lines "
        "skipped); each opens what --api-key opens (beside it, when both are given). Tenants share no "
        "prefix-cache blocks (so `cached_tokens` tells nothing of another's prompts) and see no other "
        "tenant's stored responses",
        SERVER,
        Server("api_keys", derive=derived.api_keys),
        env=("API_KEY_FILE",),
        example="api-keys.txt",
    ),
    Flag(
        ("--cors-allow-origin",),
        "an origin whose browser pages may call the API (repeat, or comma-separated; * for any); default: no "
        "CORS headers",
        SERVER,
        Server("cors_allow_origin"),
        env=("CORS_ALLOW_ORIGIN",),
        kind="list",
        parse=comma_list,
        tgi="CORS for those origins (repeat or comma-separate; `*` any); unlike TGI, none by default",
        example="https://app.example",
    ),
    Flag(
        ("--shutdown-timeout", "--graceful-termination-timeout"),
        "seconds in-flight requests get on SIGTERM before they are cancelled",
        SERVER,
        Server("shutdown_grace_s"),
        env=("SHUTDOWN_TIMEOUT", "GRACEFUL_TERMINATION_TIMEOUT"),
        parse=float,
        default=30.0,
        tgi="seconds in-flight requests get on SIGTERM (default 30, TGI's 90)",
        example="90",
    ),
    Flag(
        ("--stream-write-timeout",),
        "seconds one event of a streamed response may wait for the client to read it; past it the request is "
        "cancelled and its slot and KV blocks freed (a client that stopped reading), > 0; default: "
        f"{DEFAULT_STREAM_WRITE_TIMEOUT_S:g}",
        SERVER,
        Server("stream_write_timeout_s"),
        env=("STREAM_WRITE_TIMEOUT",),
        parse=float,
        default=DEFAULT_STREAM_WRITE_TIMEOUT_S,
        check=value_checks.deadline,
        example="7.5",
    ),
    Flag(
        ("--json-output",),
        "log as JSON lines",
        SERVER,
        LAUNCHER,
        env=("JSON_OUTPUT",),
        kind="switch",
        default=False,
        tgi=AS_TGI,
        example="true",
    ),
    Flag(
        ("--otlp-endpoint",),
        "OpenTelemetry collector that receives a trace per request: OTLP over gRPC (e.g. http://localhost:4317, "
        "as TGI), or over HTTP for port 4318 or a /v1/traces path (or as OTEL_EXPORTER_OTLP_PROTOCOL says); "
        "default: no tracing",
        SERVER,
        Server("otlp_endpoint"),
        env=("OTLP_ENDPOINT",),
        check=value_checks.otlp_endpoint,
        tgi=OTLP,
        example="http://collector:4318",
    ),
    Flag(
        ("--otlp-service-name",),
        "the service.name of the traces",
        SERVER,
        Server("otlp_service_name"),
        env=("OTLP_SERVICE_NAME",),
        default="text-generation-inference.router",
        tgi=OTLP,
        example="tgi",
    ),
    Flag(
        ("--usage-stats",),
        "accepted for TGI's command lines: this server never sends usage statistics anywhere, whatever the value",
        SERVER,
        LAUNCHER,
        env=("USAGE_STATS",),
        parse=lower,
        default="on",
        choices=("on", "off", "no-stack"),
        tgi="accepted (`on`, `off`, `no-stack`); this server sends nothing anywhere, whatever the value",
        example="off",
    ),
    Flag(
        ("-e", "--env"),
        "print the runtime environment (versions, platform) first",
        SERVER,
        LAUNCHER,
        kind="switch",
        default=False,
        tgi=AS_TGI,
    ),
    Flag(("-V", "--version"), "print the version and exit", SERVER, LAUNCHER, kind="version", tgi=AS_TGI),
)
