"""OpenAI's Responses API: routes, request schema, inputs, response bodies and stream events, the response store."""
