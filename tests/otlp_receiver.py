"""A real OTLP/HTTP trace receiver on loopback for tests: decodes each `POST /v1/traces` body with
OpenTelemetry's protobuf definitions (`opentelemetry-proto`) and keeps the spans."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class OtlpReceiver:
    """`with OtlpReceiver() as r:` ... `r.endpoint` (http://127.0.0.1:port), `r.spans()` (name -> list of
    protobuf spans), `r.resources` (service names seen)."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                ok = self.path == "/v1/traces" and self.headers["Content-Type"] == "application/x-protobuf"
                if ok:
                    message = ExportTraceServiceRequest()
                    message.ParseFromString(body)
                    receiver.requests.append(message)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OtlpReceiver:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def spans(self) -> list:
        return [
            span
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    @property
    def service_names(self) -> set[str]:
        return {
            a.value.string_value
            for request in self.requests
            for resource in request.resource_spans
            for a in resource.resource.attributes
            if a.key == "service.name"
        }
