"""Real OTLP trace receivers on loopback for tests, over HTTP (`OtlpReceiver`: each `POST /v1/traces` body
decoded with OpenTelemetry's protobuf definitions, `opentelemetry-proto`) and over gRPC (`OtlpGrpcReceiver`:
the same definitions' `TraceService` on a grpcio server); both keep the spans."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class _Spans:
    requests: list

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


class OtlpGrpcReceiver(_Spans):
    """`with OtlpGrpcReceiver() as r:` ... `r.endpoint` (http://127.0.0.1:port), `r.spans()`."""

    def __init__(self) -> None:
        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        self.requests = []
        receiver = self

        class Servicer(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):
                receiver.requests.append(request)
                return ExportTraceServiceResponse()

        self._server = grpc.server(ThreadPoolExecutor(2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Servicer(), self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{port}"

    def __enter__(self) -> OtlpGrpcReceiver:
        self._server.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.stop(None)


class OtlpReceiver(_Spans):
    """`with OtlpReceiver() as r:` ... `r.endpoint` (http://127.0.0.1:port; the exporter is given
    `r.endpoint + "/v1/traces"`), `r.spans()` (protobuf spans), `r.service_names`."""

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
