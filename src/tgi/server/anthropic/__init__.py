"""Anthropic's Messages API: routes, request schemas, inputs, response bodies and errors in its shape."""
