"""Errors on the Messages API's routes in Anthropic's shape and statuses; the other routes keep theirs."""

from __future__ import annotations

import jsonschema
import pytest
from anthropic_schemas import ERROR, parse_stream
from fastapi.testclient import TestClient

from fake_engine import FakeEngine
from tgi.server.anthropic.errors import ANTHROPIC_ERRORS, anthropic_body, anthropic_status, is_anthropic_path
from tgi.server.app import create_app
from tgi.server.http import sse
from tgi.server.http.errors import ApiError, register_dialect, validation_error
from tgi.server.service.settings import ServerSettings

register_dialect(ANTHROPIC_ERRORS)  # as `create_app` does: the tests below word errors without an app

ASK = {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}


def test_paths_and_statuses():
    assert is_anthropic_path("/v1/messages") and is_anthropic_path("/v1/messages/count_tokens")
    assert is_anthropic_path("//v1/messages/") and not is_anthropic_path("/v1/messages_x")
    assert not is_anthropic_path("/v1/chat/completions") and not is_anthropic_path("/v1/responses")
    assert [anthropic_status(s) for s in (422, 400, 401, 404, 413, 429, 503, 500)] == [
        400,
        400,
        401,
        404,
        413,
        529,
        529,
        500,
    ]
    kinds = {
        s: anthropic_body(s, "m")["error"]["type"] for s in (422, 401, 403, 404, 405, 413, 429, 500, 503)
    }
    assert kinds == {
        422: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        405: "invalid_request_error",
        413: "request_too_large",
        429: "overloaded_error",
        500: "api_error",
        503: "overloaded_error",
    }
    body = validation_error("bad").body_for("/v1/messages")
    jsonschema.validate(body, ERROR)
    assert body["request_id"].startswith("req_")
    assert set(validation_error("bad").body_for("/v1/chat/completions")) == {"error"}  # OpenAI's, unchanged
    field = "messages[0].content[1].source.data"  # Anthropic's body has no `param`: its message names it
    assert (
        validation_error("bad", field)
        .body_for("/v1/messages")["error"]["message"]
        .endswith(f"bad (at `{field}`)")
    )
    named = validation_error("`max_tokens` must be >= 1", "max_tokens").body_for("/v1/messages")
    assert named["error"]["message"] == "Input validation error: `max_tokens` must be >= 1"


def test_refusals_are_400_and_overload_is_529():
    settings = ServerSettings(api_key="k", max_concurrent_requests=0, payload_limit=2000)
    with TestClient(create_app(FakeEngine(), settings)) as c:
        key = {"x-api-key": "k"}
        r = c.post("/v1/messages", json=ASK)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        r = c.post("/v1/messages", json={**ASK, "max_tokens": None}, headers=key)  # malformed: pydantic's
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
        jsonschema.validate(r.json(), ERROR)
        r = c.post("/v1/messages", json=ASK, headers=key)  # no slot free
        assert r.status_code == 529 and r.json()["error"]["type"] == "overloaded_error"
        r = c.post("/v1/messages", json={**ASK, "system": "x" * 3000}, headers=key)
        assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"
        r = c.get("/v1/messages", headers=key)
        assert r.status_code == 405 and r.json()["error"]["type"] == "invalid_request_error"
        r = c.post("/v1/chat/completions", json={"messages": []}, headers=key)  # OpenAI's route keeps 422
        assert r.status_code == 422 and r.json()["error"]["type"] == "invalid_request_error"


async def _fails_after_one():
    yield b"event: ping\ndata: {}\n\n"
    raise ApiError(500, "the engine failed", "generation")


class _Tracker:
    def finish(self, exc=None):
        pass


async def _empty():
    return
    yield


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/chat/completions"])
async def test_an_error_after_the_headers_is_the_streams_error_event(path):
    body = b"".join([c async for c in sse.with_error_tail(_fails_after_one(), _empty(), _Tracker(), path)])
    if path == "/v1/chat/completions":  # OpenAI's: a data-only event
        assert body.endswith(b'"code":null}}\n\n') and b"event: error" not in body
        return
    (_, _), (name, data) = parse_stream(body.decode())
    assert name == "error" and data["error"] == {"type": "api_error", "message": "the engine failed"}
    jsonschema.validate(data, ERROR)
