"""The serving benchmark's image workload: the synthetic PNG data URL, the OpenAI chat and TGI payloads that
carry it, and the options it refuses."""

from __future__ import annotations

import asyncio
import base64
import io

import pytest
from PIL import Image

from tgi.benchmarks.client import openai_chat_payload, tgi_payload
from tgi.benchmarks.prompts import BenchPrompt
from tgi.benchmarks.serving import Options, Target, run_benchmark
from tgi.benchmarks.synthetic_images import png_data_url


def _decode(url: str) -> Image.Image:
    head, data = url.split(",", 1)
    assert head == "data:image/png;base64"
    return Image.open(io.BytesIO(base64.b64decode(data)))


def test_the_png_is_square_deterministic_and_differs_by_key():
    url = png_data_url(448, "a prompt")
    image = _decode(url)
    assert image.format == "PNG" and image.size == (448, 448) and image.mode == "RGB"
    assert png_data_url(448, "a prompt") == url
    assert png_data_url(448, "another prompt") != url
    with pytest.raises(ValueError, match="image size must be >= 1"):
        png_data_url(0, "x")


def test_the_openai_request_is_a_chat_message_with_the_image_part():
    prompt = BenchPrompt(text="describe it", max_tokens=5, num_words=2)
    url = png_data_url(16, "k")
    body = openai_chat_payload(prompt, "m", True, url)
    assert "prompt" not in body and body["model"] == "m" and body["max_tokens"] == 5 and body["stream"]
    assert body["stream_options"] == {"include_usage": True} and body["ignore_eos"] is True
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "describe it"},
                {"type": "image_url", "image_url": {"url": url}},
            ],
        }
    ]


def test_the_tgi_request_carries_a_markdown_image_before_the_text():
    url = png_data_url(16, "k")
    body = tgi_payload(BenchPrompt(text="describe it", max_tokens=5, num_words=2), url)
    assert body["inputs"] == f"![]({url})describe it"
    assert tgi_payload(BenchPrompt(text="t", max_tokens=5, num_words=1))["inputs"] == "t"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (Options(images=2), "--images 2: only 0 or 1 image per request"),
        (Options(images=1, image_size=0), "--image-size must be >= 1"),
    ],
)
def test_unsupported_image_options_are_refused_by_name(options, message):
    with pytest.raises(ValueError, match=message):
        asyncio.run(run_benchmark([Target("ours", "http://127.0.0.1:1")], options))
