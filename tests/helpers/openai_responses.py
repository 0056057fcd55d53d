"""OpenAI Responses checked by the official `openai` client's own models (strict validation, not the lenient
parse the client does): a response body, and every event of a streamed response."""

from __future__ import annotations

import typing


def validated_response(raw: dict):
    """The body as the client's `Response`; raises on a missing or mistyped field."""
    from openai.types.responses import Response

    return Response.model_validate(raw)


def _event_models() -> dict:
    """The client's model of each stream event, by its `type`."""
    from openai.types.responses import ResponseStreamEvent

    union = typing.get_args(ResponseStreamEvent)[0]
    return {typing.get_args(m.model_fields["type"].annotation)[0]: m for m in typing.get_args(union)}


def validated_events(client, **kwargs) -> list:
    """Every event of `client.responses.create(stream=True, **kwargs)`, each validated by the client's model
    of its type, numbered 0, 1, 2... by `sequence_number`."""
    models = _event_models()
    events = [
        models[e.type].model_validate(e.model_dump(by_alias=True))
        for e in client.responses.create(stream=True, **kwargs)
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    return events
