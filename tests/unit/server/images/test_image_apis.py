"""Images on the Responses API and the Anthropic Messages API, against the fake engine: an `input_image`
part and an `image` block give the engine the prompt and images that chat completions gives for the same
text and image, their tokens counted in usage (and by `count_tokens`); a stored conversation re-sends its
images; a text-only model or a bad image is refused by name, in each API's error shape. The model's side is
real: tiny_vlm's LLaVA processor and tokenizer (4 placeholder tokens per image)."""

from __future__ import annotations

import base64
from urllib.parse import urlsplit

import jsonschema
import pytest
from anthropic_schemas import ERROR
from fastapi.testclient import TestClient
from image_files import data_url, image_bytes, loopback_fetchable, served_image
from transformers import AutoTokenizer

from fake_engine import FakeEngine, error_of
from tgi.core.config import EngineConfig
from tgi.core.testing.tiny_vlm import save_llava_processor
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings

PNG = image_bytes(30, 20)
B64 = base64.b64encode(PNG).decode()
IMAGE_ID = 249  # `<image>` in tiny_vlm's vocabulary of 250
TEXT = "w5 w6"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return AutoTokenizer.from_pretrained(save_llava_processor(tmp_path_factory.mktemp("llava")))


@pytest.fixture
def engine(tokenizer):
    config = EngineConfig(
        model_id="fake/llava",
        max_input_tokens=64,
        max_total_tokens=128,
        max_batch_prefill_tokens=256,
        max_batch_total_tokens=1024,
    )
    return FakeEngine(config=config, tokenizer=tokenizer, image_inputs=True)


def _client(engine, **settings) -> TestClient:
    return TestClient(create_app(engine, ServerSettings(**settings)))


def _chat(url: str) -> dict:
    parts = [{"type": "text", "text": TEXT}, {"type": "image_url", "image_url": {"url": url}}]
    return {"model": "m", "messages": [{"role": "user", "content": parts}], "max_tokens": 2}


def _responses(url: str, **fields) -> dict:
    parts = [
        {"type": "input_text", "text": TEXT},
        {"type": "input_image", "image_url": url, "detail": "auto"},
    ]
    return {"model": "m", "input": [{"role": "user", "content": parts}], "max_output_tokens": 2, **fields}


def _messages(source: dict) -> dict:
    blocks = [{"type": "text", "text": TEXT}, {"type": "image", "source": source}]
    return {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": blocks}]}


def _base64(data: str = B64, media_type: str = "image/png") -> dict:
    return {"type": "base64", "media_type": media_type, "data": data}


def test_every_api_gives_the_engine_the_same_prompt_and_image_and_counts_its_tokens(engine):
    with _client(engine) as c:
        chat = c.post("/v1/chat/completions", json=_chat(data_url(PNG)))
        responses = c.post("/v1/responses", json=_responses(data_url(PNG)))
        messages = c.post("/v1/messages", json=_messages(_base64()))
        counted = c.post("/v1/messages/count_tokens", json=_messages(_base64()))
        for r in (chat, responses, messages, counted):
            assert r.status_code == 200, r.text
    prompt = engine.requests[0][0]
    assert [ids for ids, _ in engine.requests] == [prompt] * 3 and prompt.count(IMAGE_ID) == 4
    assert [[(x.offset, x.num_tokens, x.content_hash) for x in images] for images in engine.images] == [
        [(prompt.index(IMAGE_ID), 4, engine.images[0][0].content_hash)]
    ] * 3
    assert chat.json()["usage"]["prompt_tokens"] == len(prompt)
    assert responses.json()["usage"]["input_tokens"] == len(prompt)
    assert messages.json()["usage"]["input_tokens"] == len(prompt)
    assert counted.json() == {"input_tokens": len(prompt)}


def test_a_stored_conversation_sends_its_image_again(engine):
    with _client(engine) as c:
        first = c.post("/v1/responses", json=_responses(data_url(PNG)))
        assert first.status_code == 200, first.text
        body = {
            "model": "m",
            "input": "w7",
            "previous_response_id": first.json()["id"],
            "max_output_tokens": 2,
        }
        second = c.post("/v1/responses", json=body)
        assert second.status_code == 200, second.text
    prompt, before = engine.requests[1][0], engine.requests[0][0]
    through_image = before.index(IMAGE_ID) + 4
    assert prompt[:through_image] == before[:through_image]
    assert prompt.count(IMAGE_ID) == 4 and second.json()["usage"]["input_tokens"] == len(prompt)
    [image] = engine.images[1]
    assert (image.offset, image.content_hash) == (
        engine.images[0][0].offset,
        engine.images[0][0].content_hash,
    )


def test_an_anthropic_url_source_is_fetched_from_an_allowed_host_only(engine):
    with served_image(PNG) as url, loopback_fetchable():
        port = (urlsplit(url).port,)
        with _client(engine, allowed_media_domains=("127.0.0.1",), allowed_media_ports=port) as c:
            r = c.post("/v1/messages", json=_messages({"type": "url", "url": url}))
            assert r.status_code == 200, r.text
        with _client(engine, allowed_media_ports=port) as c:
            refused = c.post("/v1/messages", json=_messages({"type": "url", "url": url}))
    assert [x.num_tokens for x in engine.images[0]] == [4] and len(engine.requests) == 1
    _check_anthropic_refusal(
        refused, "messages[0].content[1].source.url", "the image URL's host is not allowed"
    )


def _check_anthropic_refusal(r, field: str, why: str) -> None:
    assert r.status_code == 400, r.text
    jsonschema.validate(r.json(), ERROR)
    message = r.json()["error"]["message"]
    assert r.json()["error"]["type"] == "invalid_request_error" and why in message and f"`{field}`" in message


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/chat/completions", _chat(data_url(PNG)), "messages[0].content[1].image_url.url"),
        ("/v1/responses", _responses(data_url(PNG)), "input[0].content[1].image_url"),
        ("/v1/messages", _messages(_base64()), "messages[0].content[1].source.data"),
        ("/v1/messages/count_tokens", _messages(_base64()), "messages[0].content[1].source.data"),
        (
            "/v1/messages",
            _messages({"type": "url", "url": "https://x.test/a.png"}),
            "messages[0].content[1].source.url",
        ),
    ],
)
def test_a_text_only_model_refuses_an_image_by_name_in_its_apis_shape(path, body, field):
    engine = FakeEngine()  # its tokenizer has no image processor
    with _client(engine) as c:
        r = c.post(path, json=body)
    why = "this model takes no images"
    if path.startswith("/v1/messages"):
        _check_anthropic_refusal(r, field, why)
    else:
        assert r.status_code == 422 and r.json()["error"]["param"] == field
        assert why in error_of(r, path)[0]
    assert engine.requests == []


@pytest.mark.parametrize(
    ("source", "url", "why"),
    [
        (_base64("@@@@"), "data:image/png;base64,@@@@", "base64 is not valid"),
        (
            _base64(media_type="image/jpeg"),
            data_url(PNG, "image/jpeg"),
            "declared `image/jpeg` but its bytes are PNG",
        ),
        (
            _base64(base64.b64encode(b"not an image").decode()),
            data_url(b"not an image"),
            "not an image of a served type",
        ),
    ],
)
def test_bad_images_are_refused_by_name_before_the_engine(engine, source, url, why):
    with _client(engine) as c:
        anthropic = c.post("/v1/messages", json=_messages(source))
        responses = c.post("/v1/responses", json=_responses(url))
        assert c.get("/health").status_code == 200
    _check_anthropic_refusal(anthropic, "messages[0].content[1].source.data", why)
    assert (
        responses.status_code == 422 and responses.json()["error"]["param"] == "input[0].content[1].image_url"
    )
    assert why in error_of(responses, "/v1/responses")[0]
    assert engine.requests == []
