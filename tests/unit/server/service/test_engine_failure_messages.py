"""What a client reads when the engine fails: an `EngineError` written to be shown, as it is; a shard's or a
node's failure (ranks, pids, hosts, paths, a peer's own words) as a generic message with a request id,
the details in the log under that id; an engine stopped by anything else, its error's type only."""

from __future__ import annotations

import logging
import re

import pytest
from fastapi.testclient import TestClient

from fake_engine import FakeEngine, error_of
from tgi.core.parallel.runner import ShardFailure
from tgi.core.request import EngineError, client_message_of
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings

PEER_DETAIL = "rank 3 on node gpu-b.internal (pid 4242) died: /srv/models/secret/model.safetensors: bad magic"
BODY = {"inputs": "Hi", "parameters": {"max_new_tokens": 2}}


@pytest.mark.parametrize("path", ["/generate", "/v1/completions"])
def test_a_shard_failure_reaches_the_client_without_its_details(path, caplog):
    engine = FakeEngine(fail_stream=0, fail_with=ShardFailure(PEER_DETAIL))
    body = BODY if path == "/generate" else {"prompt": "Hi", "max_tokens": 2}
    with (
        caplog.at_level(logging.WARNING, logger="tgi.server"),
        TestClient(create_app(engine, ServerSettings())) as c,
    ):
        r = c.post(path, json=body)
    message, _ = error_of(r, path)
    assert r.status_code == 500 and "a shard of the model failed" in message
    for detail in ("gpu-b", "4242", "/srv", "rank 3", "bad magic"):
        assert detail not in r.text
    [request_id] = re.findall(r"request id (\w+)", message)
    assert any(
        request_id in rec.getMessage() and "gpu-b.internal" in rec.getMessage() for rec in caplog.records
    )


def test_an_engine_error_written_for_clients_is_shown_as_it_is():
    engine = FakeEngine(fail_stream=0, fail_with=EngineError("the model was swapped out: try again"))
    with TestClient(create_app(engine, ServerSettings())) as c:
        r = c.post("/generate", json=BODY)
    assert r.status_code == 500 and error_of(r, "/generate")[0] == "the model was swapped out: try again"


def test_an_engine_stopped_by_another_error_shows_its_type_only():
    assert client_message_of(OSError(f"[Errno 5] {PEER_DETAIL}")) == "OSError (see the server log)"
    assert "gpu-b" not in client_message_of(ShardFailure(PEER_DETAIL))
    assert client_message_of(None) == "it was stopped"
