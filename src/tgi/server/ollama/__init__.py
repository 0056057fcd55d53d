"""Ollama's HTTP API (`/api/*`) for the one model the server runs: routes, request schemas, inputs,
response bodies and errors in its shape."""
