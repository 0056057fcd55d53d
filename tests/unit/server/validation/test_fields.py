"""Fields no API defines are dropped with one warning line per request: however many there are, and
whatever their names hold (newlines, control characters), the line is bounded and escaped."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient

from fake_engine import FakeEngine
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings
from tgi.server.validation.fields import MAX_LOGGED_FIELDS_CHARS

#: the warning's fixed words around the bounded list of names
PREFIX_CHARS = 100


def _ignored_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/completions", {"prompt": "a", "max_tokens": 2}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}),
        ("/generate", {"inputs": "a", "parameters": {"max_new_tokens": 2}}),
        ("/v1/responses", {"input": "a", "max_output_tokens": 2}),
    ],
)
def test_a_thousand_unknown_fields_give_one_bounded_line(caplog, path, body):
    extra = {f"field_{i}": i for i in range(1000)}
    extra["evil\nWARNING forged log line\r\x1b[31m"] = 1
    with TestClient(create_app(FakeEngine(), ServerSettings())) as c, caplog.at_level(logging.WARNING):
        r = c.post(path, json={**body, **extra})
    assert r.status_code == 200, r.text
    [line] = _ignored_lines(caplog)
    assert "1001 request field(s)" in line
    assert len(line) <= MAX_LOGGED_FIELDS_CHARS + PREFIX_CHARS
    assert "\n" not in line and "\r" not in line and "\x1b" not in line


def test_a_name_with_newlines_is_escaped_and_nested_fields_share_the_line(caplog):
    body = {
        "messages": [{"role": "user", "content": "Hi", "nested\nname": 1}],
        "max_tokens": 2,
        "top\nlevel": 1,
    }
    with TestClient(create_app(FakeEngine(), ServerSettings())) as c, caplog.at_level(logging.WARNING):
        r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    [line] = _ignored_lines(caplog)
    assert "2 request field(s)" in line and "\n" not in line
    assert r"`top\nlevel`" in line and r"`messages[0].nested\nname`" in line
