"""OpenTelemetry tracing with the real SDK and OTLP exporters, received by real OTLP receivers on loopback
(HTTP and gRPC): the spans of each request, their parent-child links, the client's `traceparent`, TGI's
attributes; a collector that is down fails no request; no endpoint, no tracing."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from otlp_receiver import OtlpGrpcReceiver, OtlpReceiver

from fake_engine import FakeEngine
from tgi.core.config import ConfigError
from tgi.core.sampling_params import MAX_STOP_SEQUENCE_CHARS
from tgi.server.app import create_app
from tgi.server.observability.tracing import (
    ATTRIBUTE_LENGTH_ENV,
    DEFAULT_ATTRIBUTE_LENGTH_LIMIT,
    otlp_protocol,
    traces_url,
)
from tgi.server.service.settings import ServerSettings

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


def _attrs(span) -> dict:
    out = {}
    for a in span.attributes:
        v = a.value
        out[a.key] = getattr(v, v.WhichOneof("value"))
    return out


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_each_request_is_a_span_with_validation_queue_prefill_decode_children(protocol, monkeypatch):
    engine = FakeEngine()
    for name in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    receiving = OtlpReceiver() if protocol == "http/protobuf" else OtlpGrpcReceiver()
    with receiving as receiver:
        # chosen by the endpoint: a /v1/traces path is HTTP, a bare host:port gRPC (TGI's meaning)
        endpoint = receiver.endpoint + ("/v1/traces" if protocol == "http/protobuf" else "")
        assert otlp_protocol(endpoint) == protocol
        settings = ServerSettings(otlp_endpoint=endpoint, otlp_service_name="tgi-test")
        with TestClient(create_app(engine, settings)) as c:
            body = {"inputs": "Hello", "parameters": {"max_new_tokens": 3, "seed": 5, "do_sample": True}}
            headers = {"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"}
            assert c.post("/generate", json=body, headers=headers).status_code == 200
            with c.stream("POST", "/generate_stream", json=body) as r:
                assert r.status_code == 200 and sum(1 for _ in r.iter_lines()) > 0
            chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
            assert c.post("/v1/chat/completions", json=chat).status_code == 200
            assert c.get("/health").status_code == 200  # not traced
        # leaving the client flushed the exporter
    spans = receiver.spans()
    assert receiver.service_names == {"tgi-test"}
    roots = {s.name: s for s in spans if s.name in ("generate", "generate_stream", "chat_completions")}
    assert set(roots) == {"generate", "generate_stream", "chat_completions"}
    assert len(spans) == 3 * 5  # each root and its four children, nothing else

    root = roots["generate"]
    assert (
        root.trace_id.hex() == TRACE_ID and root.parent_span_id.hex() == CLIENT_SPAN
    )  # traceparent honoured
    assert roots["generate_stream"].trace_id.hex() != TRACE_ID and not roots["generate_stream"].parent_span_id
    for name, r in roots.items():
        children = [s for s in spans if s.parent_span_id == r.span_id]
        assert [c.name for c in sorted(children, key=lambda s: s.start_time_unix_nano)] == [
            "validation",
            "queue",
            "prefill",
            "decode",
        ], name
        assert all(c.trace_id == r.trace_id for c in children)
        assert all(r.start_time_unix_nano <= c.start_time_unix_nano <= c.end_time_unix_nano for c in children)
        assert all(c.end_time_unix_nano <= r.end_time_unix_nano for c in children)
    attrs = _attrs(root)
    assert attrs["gen_ai.usage.input_tokens"] == 5 and attrs["gen_ai.usage.output_tokens"] == 3
    assert attrs["http.response.status_code"] == 200 and attrs["seed"] == "5"
    assert "do_sample=True" in attrs["parameters"] and "seed=5" in attrs["parameters"]
    assert {"validation_time", "queue_time", "inference_time", "time_per_token", "total_time"} <= set(attrs)


def test_a_collector_that_is_down_fails_no_request(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")  # the exporter gives up within a second
    with OtlpReceiver() as closed:
        endpoint = closed.endpoint + "/v1/traces"
    settings = ServerSettings(otlp_endpoint=endpoint)  # nothing listens there any more
    with TestClient(create_app(FakeEngine(), settings)) as c:
        for _ in range(3):
            r = c.post("/generate", json={"inputs": "Hi", "parameters": {"max_new_tokens": 2}})
            assert r.status_code == 200


def test_no_endpoint_no_tracing():
    app = create_app(FakeEngine(), ServerSettings())
    assert app.state.service.tracing is None
    assert not any("Tracing" in m.cls.__name__ for m in app.user_middleware)


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("http://collector:4318", "http://collector:4318/v1/traces"),
        ("http://collector:4318/", "http://collector:4318/v1/traces"),
        ("https://otel.example/custom/traces", "https://otel.example/custom/traces"),
    ],
)
def test_traces_url(endpoint, url):
    assert traces_url(endpoint) == url


@pytest.mark.parametrize(
    ("endpoint", "variable", "protocol"),
    [
        ("http://collector:4317", None, "grpc"),  # TGI's example
        ("http://collector", None, "grpc"),
        ("http://collector:4318", None, "http/protobuf"),
        ("https://otel.example/v1/traces", None, "http/protobuf"),
        ("http://collector:4317", "http/protobuf", "http/protobuf"),
        ("http://collector:4318", "grpc", "grpc"),
    ],
)
def test_the_protocol_follows_the_endpoint_or_opentelemetrys_variable(
    endpoint, variable, protocol, monkeypatch
):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    if variable:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", variable)
    else:
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    assert otlp_protocol(endpoint) == protocol
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
    with pytest.raises(ConfigError, match="http/json"):
        otlp_protocol(endpoint)


@pytest.mark.parametrize(("variable", "limit"), [(None, DEFAULT_ATTRIBUTE_LENGTH_LIMIT), ("100", 100)])
def test_no_span_attribute_exceeds_the_length_limit(monkeypatch, variable, limit):
    """Four of the longest stop sequences allowed reach the collector cut to the limit: ours, or
    OpenTelemetry's variable."""
    for name in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", *ATTRIBUTE_LENGTH_ENV):
        monkeypatch.delenv(name, raising=False)
    if variable is not None:
        monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", variable)
    with OtlpReceiver() as receiver:
        settings = ServerSettings(otlp_endpoint=receiver.endpoint + "/v1/traces")
        with TestClient(create_app(FakeEngine(), settings)) as c:
            body = {
                "inputs": "Hello",
                "parameters": {"max_new_tokens": 2, "stop": [c * MAX_STOP_SEQUENCE_CHARS for c in "xyzw"]},
            }
            assert c.post("/generate", json=body).status_code == 200
    [root] = [s for s in receiver.spans() if s.name == "generate"]
    attrs = _attrs(root)
    assert "stop=('xxx" in attrs["parameters"] and len(attrs["parameters"]) == limit
    assert all(len(v) <= limit for v in attrs.values() if isinstance(v, str))
