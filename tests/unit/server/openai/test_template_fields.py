"""The chat template's fields on OpenAI's chat completions and TGI's /chat_tokenize, against the fake engine
(its template rendered by transformers' renderer): the prompt each asks for reaches the engine, the answer
holds only the continuation, a request's template runs in Jinja's sandbox behind the operator's flag."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from fake_engine import REPLY, FakeEngine, error_of
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings

CHAT = "/v1/chat/completions"
PREFILL = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Well,"}]
#: a request's template that shows two of its variables
SHOWS = "{{ greeting }}|{{ reasoning_effort }}|{% for m in messages %}{{ m.content }}{% endfor %}"


@pytest.fixture
def engine():
    return FakeEngine()


def client_of(engine, **settings) -> TestClient:
    return TestClient(create_app(engine, ServerSettings(**settings)))


def prompt_of(engine) -> str:
    return "".join(chr(i) for i in engine.requests[-1][0])


def test_continue_final_message_continues_the_last_message_and_answers_only_what_follows(engine):
    with client_of(engine) as c:
        body = {"messages": PREFILL, "max_tokens": 5, "continue_final_message": True}
        r = c.post(CHAT, json=body)
        assert r.status_code == 200, r.text
        assert prompt_of(engine) == "<user>Hi<assistant>Well,"  # left open: no closing, no new turn
        assert r.json()["choices"][0]["message"]["content"] == REPLY[:5]
        c.post(CHAT, json={**body, "add_generation_prompt": False})
        assert prompt_of(engine) == "<user>Hi<assistant>Well,"
        c.post(CHAT, json={"messages": PREFILL, "max_tokens": 5, "add_generation_prompt": False})
        assert prompt_of(engine) == "<user>Hi<assistant>Well,"  # closed, and no generation prompt after it
        c.post(CHAT, json={"messages": PREFILL, "max_tokens": 5})
        assert prompt_of(engine) == "<user>Hi<assistant>Well,<assistant>"


def test_continue_final_message_with_add_generation_prompt_is_refused(engine):
    with client_of(engine) as c:
        body = {"messages": PREFILL, "continue_final_message": True, "add_generation_prompt": True}
        r = c.post(CHAT, json=body)
        assert r.status_code == 422 and r.json()["error"]["param"] == "continue_final_message"
    assert engine.requests == []


@pytest.mark.parametrize(
    ("field", "value"),
    [("chat_template", SHOWS), ("documents", [{"title": "T", "text": "x"}])],
)
def test_a_requests_template_and_documents_are_refused_by_name_without_the_flag(engine, field, value):
    with client_of(engine) as c:
        for path in (CHAT, "/chat_tokenize"):
            r = c.post(path, json={"messages": PREFILL[:1], field: value})
            assert r.status_code == 422, r.text
            message, _ = error_of(r, path)
            assert f"`{field}`" in message and "--trust-request-chat-template" in message
    assert engine.requests == []


def test_variables_and_reasoning_effort_reach_a_requests_template(engine):
    body = {
        "messages": PREFILL[:1],
        "max_tokens": 2,
        "chat_template": SHOWS,
        "chat_template_kwargs": {"greeting": "Bonjour"},
        "reasoning_effort": "low",
    }
    with client_of(engine, trust_request_chat_template=True) as c:
        assert c.post(CHAT, json=body).status_code == 200
        assert prompt_of(engine) == "Bonjour|low|Hi"
        tokenized = c.post("/chat_tokenize", json=body).json()
        assert tokenized["templated_text"] == "Bonjour|low|Hi"


def test_documents_reach_a_template_that_reads_them(engine):
    template = "{% for d in documents %}[{{ d.title }}]{% endfor %}{{ messages[0].content }}"
    body = {"messages": PREFILL[:1], "chat_template": template, "documents": [{"title": "T", "text": "x"}]}
    with client_of(engine, trust_request_chat_template=True) as c:
        assert c.post("/chat_tokenize", json=body).json()["templated_text"] == "[T]Hi"


def test_a_variable_the_template_does_not_read_changes_nothing(engine):
    with client_of(engine) as c:
        body = {"messages": PREFILL[:1], "max_tokens": 2}
        extra = {"chat_template_kwargs": {"enable_thinking": False}, "reasoning_effort": "high"}
        assert c.post(CHAT, json={**body, **extra}).status_code == 200
        assert prompt_of(engine) == "<user>Hi<assistant>"


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",  # Python's internals: the sandbox stops it
        "{{ messages.append(1) }}",  # the immutable sandbox: no changing what it was given
    ],
)
def test_a_requests_template_runs_in_jinjas_sandbox(engine, template):
    with client_of(engine, trust_request_chat_template=True) as c:
        r = c.post(CHAT, json={"messages": PREFILL[:1], "chat_template": template})
        assert r.status_code == 422, r.text
        message = r.json()["error"]["message"]
        assert message.startswith("Template error: access to attribute") and message.endswith("is unsafe.")
    assert engine.requests == []


def test_completions_refuse_the_templates_fields_by_name(engine):
    with client_of(engine) as c:
        r = c.post("/v1/completions", json={"prompt": "Hi", "chat_template_kwargs": {"a": 1}})
        assert r.status_code == 422 and r.json()["error"]["param"] == "chat_template_kwargs"
