"""OpenTelemetry tracing (`--otlp-endpoint`, `--otlp-service-name`): one trace span per generation request,
exported over OTLP by the OpenTelemetry SDK's batch processor, off the event loop.

The protocol (`otlp_protocol`): OpenTelemetry's `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` or
`OTEL_EXPORTER_OTLP_PROTOCOL` when set (`grpc` or `http/protobuf`); otherwise HTTP for an endpoint on OTLP's
HTTP port 4318 or with a `/v1/traces` path, and gRPC, what TGI's `--otlp-endpoint` means, for any other
(`http://collector:4317`).

Spans of one request (names as TGI's router spans where it has one):

    generate | generate_stream | compat_generate | chat_completions | completions | invocations   (SERVER)
    ├── validation   request arrival -> the engine is given the sequence (parsing, templating, tokenizing)
    ├── queue        -> the engine's first scheduled step for it (the final event's `queue_time`)
    ├── prefill      -> its first token reached the server
    └── decode       -> its last token reached the server

A request of several sequences (`best_of`, `n`, several prompts) gets one queue/prefill/decode set per
sequence. The root span carries TGI's attributes (`parameters`, `seed`, `validation_time`, `queue_time`,
`inference_time`, `time_per_token`, `total_time`) and OpenTelemetry's GenAI ones
(`gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`, `gen_ai.response.finish_reasons`), and the HTTP
status. A W3C `traceparent` header (and `tracestate`) makes it a child of the client's span. No attribute
value is longer than `span_limits()` allows (4096 characters unless OpenTelemetry's variables say).

Off by default: without an endpoint no middleware is installed, nothing is imported from OpenTelemetry and
`InferenceService.tracing` is None. A collector that is down or wrong never fails a request: the exporter's
errors are logged by the SDK on its own thread. Needs the `otel` extra (`pip install tgi[otel]`).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any
from urllib.parse import urlsplit

from tgi.core.config import ConfigError

log = logging.getLogger("tgi.server")

#: the routes traced, and their root span's name
TRACED_ROUTES = {
    "/generate": "generate",
    "/generate_stream": "generate_stream",
    "/": "compat_generate",
    "/v1/chat/completions": "chat_completions",
    "/v1/completions": "completions",
    "/invocations": "invocations",
}


PROTOCOLS = ("grpc", "http/protobuf")


def otlp_protocol(endpoint: str) -> str:
    """`grpc` or `http/protobuf` for `endpoint` (see the module docstring); `ConfigError` for another
    protocol named in the environment."""
    chosen = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL"
    )
    if chosen:
        if chosen not in PROTOCOLS:
            raise ConfigError(f"OTLP protocol {chosen!r} is not served: use grpc or http/protobuf")
        return chosen
    parts = urlsplit(endpoint)
    return "http/protobuf" if parts.port == 4318 or parts.path.rstrip("/").endswith("/v1/traces") else "grpc"


def exporter_module(protocol: str) -> str:
    return f"opentelemetry.exporter.otlp.proto.{'grpc' if protocol == 'grpc' else 'http'}.trace_exporter"


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of an endpoint: a bare `http://host:port` gets OTLP's `/v1/traces` path."""
    return endpoint if urlsplit(endpoint).path.strip("/") else endpoint.rstrip("/") + "/v1/traces"


#: the longest value of a span attribute (a client's stop sequences or grammar can be megabytes), in
#: characters, unless OpenTelemetry's own variables set one
DEFAULT_ATTRIBUTE_LENGTH_LIMIT = 4096
ATTRIBUTE_LENGTH_ENV = ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")


def span_limits() -> Any:
    """The SDK's `SpanLimits`: values cut at `DEFAULT_ATTRIBUTE_LENGTH_LIMIT` characters, or at what
    `OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT` / `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT` say (the SDK reads
    them when no length is given)."""
    from opentelemetry.sdk.trace import SpanLimits

    if any(os.environ.get(name) for name in ATTRIBUTE_LENGTH_ENV):
        return SpanLimits()
    return SpanLimits(max_attribute_length=DEFAULT_ATTRIBUTE_LENGTH_LIMIT)


class Tracing:
    """The tracer of one server, with its provider (flushed and closed by `shutdown()`)."""

    def __init__(self, endpoint: str, service_name: str) -> None:
        protocol = otlp_protocol(endpoint)
        try:
            import importlib

            exporter_class = importlib.import_module(exporter_module(protocol)).OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            raise ConfigError(
                f"--otlp-endpoint needs the OpenTelemetry SDK and OTLP exporter: pip install 'tgi[otel]' ({exc})"
            ) from None
        from tgi.server import __version__

        resource = Resource.create({"service.name": service_name, "service.version": __version__})
        self.provider = TracerProvider(resource=resource, span_limits=span_limits())
        if protocol == "grpc":
            exporter = exporter_class(endpoint=endpoint, insecure=urlsplit(endpoint).scheme == "http")
        else:
            exporter = exporter_class(endpoint=traces_url(endpoint))
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.protocol = protocol
        self.tracer = self.provider.get_tracer("tgi.server", __version__)

    @property
    def middleware_class(self) -> type:
        return TracingMiddleware

    def sequence(self, token_ids: list[int], params: Any) -> SequenceTrace:
        """Start following one engine sequence of the current request (called as it is given to the engine)."""
        return SequenceTrace(self, len(token_ids), params)

    def shutdown(self) -> None:
        self.provider.shutdown()  # exports what is left, within the exporter's timeout


class TracingMiddleware:
    """Pure ASGI middleware: the root span of each traced route, current while the route (and a streamed
    body) runs, so that `Tracing.sequence` finds it."""

    def __init__(self, app, tracing: Tracing) -> None:
        self.app = app
        self.tracing = tracing

    async def __call__(self, scope, receive, send) -> None:
        name = TRACED_ROUTES.get(scope.get("path", "")) if scope["type"] == "http" else None
        if name is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        parent = TraceContextTextMapPropagator().extract(headers)
        attributes = {"http.request.method": "POST", "url.path": scope["path"], "http.route": scope["path"]}
        status = {"code": 0}

        async def send_status(message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        with self.tracing.tracer.start_as_current_span(
            name, context=parent, kind=trace.SpanKind.SERVER, attributes=attributes
        ) as span:
            await self.app(scope, receive, send_status)
            span.set_attribute("http.response.status_code", status["code"])
            if status["code"] >= 500:
                span.set_status(trace.Status(trace.StatusCode.ERROR))


def _parameters(params: Any) -> str:
    """The sampling parameters a client chose, as TGI's `parameters` attribute (defaults left out)."""
    from dataclasses import fields

    shown = []
    for f in fields(params):
        value = getattr(params, f.name)
        if f.name != "extra" and value != f.default and value not in ((), None):
            shown.append(f"{f.name}={value!r}")
    return ", ".join(shown)


class SequenceTrace:
    """The child spans of one sequence, written when its last event arrives (or it ends otherwise): their
    times are known only then (`queue_time` comes with the final event)."""

    def __init__(self, tracing: Tracing, num_prompt_tokens: int, params: Any) -> None:
        from opentelemetry import trace

        self._tracer = tracing.tracer
        self.root = trace.get_current_span()
        self.context = trace.set_span_in_context(self.root)
        self.submitted_ns = time.time_ns()
        self.first_token_ns: int | None = None
        self.num_prompt_tokens = num_prompt_tokens
        self.params = params
        self._ended = False
        if self.root.is_recording():
            start = getattr(self.root, "start_time", None) or self.submitted_ns
            self._span("validation", start, self.submitted_ns)
            self.root.set_attribute("parameters", _parameters(params))
            self.root.set_attribute("validation_time", (self.submitted_ns - start) / 1e9)
            self.root.set_attribute("gen_ai.usage.input_tokens", num_prompt_tokens)

    def _span(self, name: str, start_ns: int, end_ns: int, **attributes) -> None:
        span = self._tracer.start_span(name, context=self.context, start_time=start_ns, attributes=attributes)
        span.end(end_time=max(end_ns, start_ns))

    def token(self, event: Any) -> None:
        """Called for each event of the sequence, in order."""
        if self.first_token_ns is None:
            self.first_token_ns = time.time_ns()
        if event.finish_reason is not None:
            self.end(event)

    def end(self, final: Any = None) -> None:
        """The sequence is over: `final` is its last event, None when it failed or was cancelled."""
        if self._ended or not self.root.is_recording():
            return
        self._ended = True
        now = time.time_ns()
        queue_s = final.queue_time if final is not None else 0.0
        scheduled = min(self.submitted_ns + int(queue_s * 1e9), self.first_token_ns or now)
        self._span("queue", self.submitted_ns, scheduled)
        if self.first_token_ns is not None:
            self._span("prefill", scheduled, self.first_token_ns, input_tokens=self.num_prompt_tokens)
            self._span("decode", self.first_token_ns, now)
        if final is None:
            return
        generated = final.index + 1
        self.root.set_attribute("gen_ai.usage.output_tokens", generated)
        self.root.set_attribute("gen_ai.response.finish_reasons", [final.finish_reason.value])
        self.root.set_attribute("queue_time", final.queue_time)
        self.root.set_attribute("inference_time", final.inference_time)
        self.root.set_attribute("time_per_token", final.inference_time / max(generated, 1))
        start = getattr(self.root, "start_time", None) or self.submitted_ns
        self.root.set_attribute("total_time", (now - start) / 1e9)
        if final.seed is not None:
            self.root.set_attribute("seed", str(final.seed))
