"""Prometheus metrics with TGI's names, and OpenTelemetry tracing."""
