"""Images through the HTTP routes to the fake engine: parsed, limited, refused with their reason, and the
`ImageInput`s that reach the engine. The model's side is real: a LLaVA processor and tokenizer saved by
`tgi.core.testing.tiny_vlm` (4 placeholder tokens per image)."""

import threading
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient
from image_files import data_url, image_bytes, loopback_fetchable, served_image
from transformers import AutoTokenizer

from fake_engine import FakeEngine, error_of
from tgi.core.config import EngineConfig
from tgi.core.testing.tiny_vlm import save_llava_processor
from tgi.server.app import create_app
from tgi.server.images import fetch
from tgi.server.service import inference as service_module
from tgi.server.service.settings import ServerSettings

PNG = image_bytes(30, 20)
IMAGE_ID = 249  # `<image>` in tiny_vlm's vocabulary of 250


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return AutoTokenizer.from_pretrained(save_llava_processor(tmp_path_factory.mktemp("llava")))


def _engine(tokenizer, image_inputs=True, max_input_tokens=64):
    config = EngineConfig(
        model_id="fake/llava",
        max_input_tokens=max_input_tokens,
        max_total_tokens=128,
        max_batch_prefill_tokens=256,
        max_batch_total_tokens=1024,
    )
    return FakeEngine(config=config, tokenizer=tokenizer, image_inputs=image_inputs)


def _client(engine, **settings):
    return TestClient(create_app(engine, ServerSettings(**settings)))


def _chat(*urls, text="w5 w6"):
    parts = [{"type": "text", "text": text}] + [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return {"messages": [{"role": "user", "content": parts}], "max_tokens": 2}


def test_a_markdown_image_on_generate_reaches_the_engine_as_its_placeholders(tokenizer):
    engine = _engine(tokenizer)
    with _client(engine) as c:
        r = c.post(
            "/generate", json={"inputs": f"w5 ![]({data_url(PNG)}) w6", "parameters": {"max_new_tokens": 2}}
        )
        assert r.status_code == 200, r.text
    (prompt, _), (images,) = engine.requests[0], engine.images
    assert prompt == [5, IMAGE_ID, IMAGE_ID, IMAGE_ID, IMAGE_ID, 6]
    assert [(x.offset, x.num_tokens) for x in images] == [(1, 4)]
    assert images[0].pixel_values.shape == (1, 3, 28, 28)


def test_chat_image_parts_are_rendered_by_the_template_and_counted_in_usage(tokenizer):
    engine = _engine(tokenizer)
    with _client(engine) as c:
        r = c.post(
            "/v1/chat/completions",
            json=_chat(data_url(PNG), data_url(image_bytes(9, 9, "JPEG"), "image/jpeg")),
        )
        assert r.status_code == 200, r.text
        prompt = engine.requests[0][0]
        assert r.json()["usage"]["prompt_tokens"] == len(prompt)
        assert prompt.count(IMAGE_ID) == 8 and len(engine.images[0]) == 2
        tokenized = c.post("/chat_tokenize", json=_chat(data_url(PNG), data_url(PNG)))
        assert tokenized.status_code == 200, tokenized.text
        assert [t["id"] for t in tokenized.json()["tokenize_response"]] == prompt


def test_a_runner_without_a_vision_tower_refuses_images_by_name(tokenizer):
    engine = _engine(tokenizer, image_inputs=False)
    with _client(engine) as c:
        r = c.post("/v1/chat/completions", json=_chat(data_url(PNG)))
    assert r.status_code == 422 and "does not take image inputs" in error_of(r, "/v1/")[0]
    assert engine.requests == []


def test_image_tokens_count_against_max_input_tokens(tokenizer):
    engine = _engine(tokenizer, max_input_tokens=5)
    with _client(engine) as c:  # 2 words and 4 image tokens
        r = c.post(
            "/generate", json={"inputs": f"w5 ![]({data_url(PNG)}) w6", "parameters": {"max_new_tokens": 2}}
        )
    assert r.status_code == 422 and "Given: 6" in error_of(r, "/generate")[0]


def test_chat_tokenize_refuses_a_prompt_past_the_limit_before_aligning_its_tokens(tokenizer, monkeypatch):
    aligned = []
    monkeypatch.setattr(service_module, "aligned_spans", lambda *a: aligned.append(a) or [])
    engine = _engine(tokenizer, max_input_tokens=5)
    with _client(engine) as c:  # 2 words and 4 image tokens: 6 ids after the processor, and the template's
        r = c.post("/chat_tokenize", json=_chat(data_url(PNG)))
    assert r.status_code == 422 and "must have less than 5 tokens" in r.text
    assert aligned == []  # the alignment (difflib: quadratic in the worst case) never ran


BOMB = image_bytes(300, 300)  # over --max-image-pixels=10000 below


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("data:image/png;base64,@@@@", "base64 is not valid"),
        (data_url(PNG, "image/jpeg"), "declared `image/jpeg` but its bytes are PNG"),
        (data_url(PNG, "image/svg+xml"), "unsupported image type `image/svg+xml`"),
        (data_url(image_bytes(60, 60)[:-40]), "truncated or corrupt"),
        (data_url(BOMB), "300x300 pixels is over --max-image-pixels (10000)"),
        ("http://127.0.0.1/cat.png", "the image URL's host is not allowed"),
        ("http://images.example.com:9/cat.png", "names port 9; image URLs may use ports 80 and 443"),
        ("http://images.example.com:99999/cat.png", "the image URL is not valid"),
        ("file:///etc/passwd", "file: image URLs are refused"),
    ],
)
def test_bad_images_are_refused_with_the_reason_before_the_engine(tokenizer, url, why):
    engine = _engine(tokenizer)
    with _client(engine, max_image_pixels=10_000) as c:
        r = c.post("/v1/chat/completions", json=_chat(url))
        assert r.status_code == 422, r.text
        assert why in error_of(r, "/v1/")[0]
        assert r.json()["error"]["param"] == "messages[0].content[1].image_url.url"
        tgi = c.post("/generate", json={"inputs": f"w5 ![]({url})"})
        assert tgi.status_code == 422 and why in error_of(tgi, "/generate")[0]
        assert c.get("/health").status_code == 200
    assert engine.requests == []


def test_too_many_images_are_refused(tokenizer):
    engine = _engine(tokenizer)
    with _client(engine, max_images_per_request=1) as c:
        r = c.post("/v1/chat/completions", json=_chat(data_url(PNG), data_url(PNG)))
    assert r.status_code == 422
    assert "2 images; --max-images-per-request allows 1" in error_of(r, "/v1/")[0]
    assert engine.requests == []


def test_truncate_cannot_cut_images(tokenizer):
    engine = _engine(tokenizer)
    body = {"inputs": f"w5 ![]({data_url(PNG)}) w6", "parameters": {"max_new_tokens": 2, "truncate": 3}}
    with _client(engine) as c:
        r = c.post("/generate", json=body)
    assert r.status_code == 422 and "cannot be used with images" in error_of(r, "/generate")[0]


def test_an_allowed_host_is_fetched_over_http(tokenizer):
    engine = _engine(tokenizer)
    with served_image(PNG) as url, loopback_fetchable():
        allowed = {"allowed_media_domains": ("127.0.0.1",), "allowed_media_ports": (urlsplit(url).port,)}
        with _client(engine, **allowed) as c:
            r = c.post("/v1/chat/completions", json=_chat(url))
        assert r.status_code == 200, r.text
    assert [x.num_tokens for x in engine.images[0]] == [4]


def test_image_urls_are_had_on_the_servers_own_fetch_threads(tokenizer, monkeypatch):
    """Not on asyncio's default executor, which grammar validation uses (slow hosts could fill it)."""
    threads, real = [], fetch.image_bytes
    monkeypatch.setattr(
        fetch, "image_bytes", lambda *a: threads.append(threading.current_thread().name) or real(*a)
    )
    with _client(_engine(tokenizer)) as c:
        assert c.post("/v1/chat/completions", json=_chat(data_url(PNG))).status_code == 200
    assert len(threads) == 1 and threads[0].startswith("tgi-image-fetch")


def test_qwen2_vl_images_reach_the_engine_with_their_patch_grid(tmp_path):
    from tgi.core.testing.tiny_qwen2_vl import save_qwen2_vl_processor

    engine = _engine(AutoTokenizer.from_pretrained(save_qwen2_vl_processor(tmp_path / "qwen2-vl")))
    with _client(engine) as c:
        r = c.post(
            "/v1/chat/completions", json=_chat(data_url(image_bytes(60, 40)), data_url(image_bytes(40, 90)))
        )
        assert r.status_code == 200, r.text
    prompt, images = engine.requests[0][0], engine.images[0]
    image_id = 248  # `<|image_pad|>` in tiny_qwen2_vl's vocabulary of 250
    assert [x.extras["image_grid_thw"].tolist() for x in images] == [[[1, 4, 6]], [[1, 6, 4]]]
    assert [x.pixel_values.shape for x in images] == [(24, 1176), (24, 1176)]  # each its own patch rows
    assert all(prompt[x.offset : x.offset + x.num_tokens] == [image_id] * 6 for x in images)
    assert all(
        prompt[x.offset - 1] == 246 and prompt[x.offset + 6] == 247 for x in images
    )  # vision start/end
    with _client(engine) as c:  # a markdown image on /generate: wrapped as the chat template wraps it
        body = {"inputs": f"w5 ![]({data_url(image_bytes(60, 40))}) w6", "parameters": {"max_new_tokens": 2}}
        assert c.post("/generate", json=body).status_code == 200
    assert engine.requests[1][0] == [5, 246, *[image_id] * 6, 247, 6]


def test_idefics3_tiles_reach_the_engine_each_with_its_span(tmp_path):
    from tgi.core.testing.tiny_idefics3 import save_idefics3_processor

    engine = _engine(AutoTokenizer.from_pretrained(save_idefics3_processor(tmp_path / "idefics3")))
    with _client(engine, max_images_per_request=1) as c:  # one image, however many tiles
        r = c.post("/v1/chat/completions", json=_chat(data_url(image_bytes(60, 40))))
        assert r.status_code == 200, r.text
    prompt, tiles = engine.requests[0][0], engine.images[0]
    # 2 x 2 tiles and the whole image: each a run of 4 `<image>` (211) after its `<row_r_col_c>` or
    # `<global-img>` token, in tiny_idefics3's vocabulary of 250
    assert [prompt[x.offset - 1] for x in tiles] == [214, 215, 220, 221, 213]
    assert all(prompt[x.offset : x.offset + x.num_tokens] == [211] * 4 for x in tiles)
    assert all(x.pixel_values.shape == (1, 3, 56, 56) for x in tiles)
    assert all(x.extras["pixel_attention_mask"].shape == (1, 56, 56) for x in tiles)
    assert len({x.content_hash for x in tiles}) == 5
    assert r.json()["usage"]["prompt_tokens"] == len(prompt)
