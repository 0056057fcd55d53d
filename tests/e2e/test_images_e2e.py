"""Images through a real `tgi launch` of a tiny random LLaVA (`tgi.core.testing.tiny_vlm`) with the official
`openai` client: a data-URL image's greedy tokens equal transformers' on the same weights and processor,
TGI's markdown image on /generate gives the same, Responses' `input_image` and (with the official
`anthropic` client) a Messages `image` block give chat completions' greedy text and count the image's
tokens, and bad images are refused with their reason while the server stays healthy."""

from __future__ import annotations

import base64

import anthropic
import httpx
import openai
import pytest
import torch
from helpers.image_files import data_url, image_bytes
from PIL import Image

from tgi.core.testing.tiny_vlm import save_random_llava

PNG = image_bytes(40, 30, color=(10, 200, 90))
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def served(tmp_path_factory, launch_server, stop_server):
    root = tmp_path_factory.mktemp("images-e2e")
    model = save_random_llava(root / "llava")
    server = launch_server(
        root, "--model-id", str(model), "--backend", "cpu", "--dtype", "float32", "--max-total-tokens", "512"
    )  # fmt: skip
    yield openai.OpenAI(base_url=server.url + "/v1", api_key="-", max_retries=0), server.url, model
    assert stop_server(server) == 0, server.logs()


def _reference(model, text_before: str, text_after: str) -> list[str]:
    """transformers' greedy tokens after the chat prompt with the image between the two texts."""
    import io

    from transformers import AutoProcessor, LlavaForConditionalGeneration

    processor = AutoProcessor.from_pretrained(model)
    content = [
        {"type": "text", "text": text_before},
        {"type": "image"},
        {"type": "text", "text": text_after},
    ]
    prompt = processor.tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    image = Image.open(io.BytesIO(PNG)).convert("RGB")
    inputs = processor(text=[prompt], images=[image], return_tensors="pt", add_special_tokens=False)
    hf = LlavaForConditionalGeneration.from_pretrained(model, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        out = hf.generate(**inputs, max_new_tokens=MAX_TOKENS, do_sample=False)
    new = out[0, inputs["input_ids"].shape[1] :].tolist()
    return processor.tokenizer.convert_ids_to_tokens(new)


def test_a_data_url_image_generates_transformers_greedy_tokens(served):
    client, url, model = served
    parts = [
        {"type": "text", "text": "w5 w6"},
        {"type": "image_url", "image_url": {"url": data_url(PNG)}},
        {"type": "text", "text": "w7"},
    ]
    reply = client.chat.completions.create(
        model="tgi",
        messages=[{"role": "user", "content": parts}],
        max_tokens=MAX_TOKENS,
        temperature=0,
        logprobs=True,
    )
    assert [t.token for t in reply.choices[0].logprobs.content] == _reference(model, "w5 w6", "w7")
    assert reply.usage.prompt_tokens >= 4  # the image's 4 placeholder tokens are counted
    tokenized = httpx.post(url + "/chat_tokenize", json={"messages": [{"role": "user", "content": parts}]})
    assert len(tokenized.json()["tokenize_response"]) == reply.usage.prompt_tokens


def test_bad_images_are_refused_and_the_server_stays_healthy(served):
    client, url, _ = served
    for bad, why in [
        (data_url(PNG, "image/jpeg"), "its bytes are PNG"),
        ("data:image/png;base64,@@", "base64 is not valid"),
        (f"{url}/health", "names port"),  # the server's own URL: not on ports 80 or 443
        ("http://127.0.0.1/health", "the image URL's host is not allowed"),  # loopback
    ]:
        parts = [{"type": "text", "text": "w5"}, {"type": "image_url", "image_url": {"url": bad}}]
        with pytest.raises(openai.UnprocessableEntityError) as caught:
            client.chat.completions.create(
                model="tgi", messages=[{"role": "user", "content": parts}], max_tokens=2
            )
        assert why in str(caught.value)
    assert httpx.get(url + "/health").status_code == 200


def test_a_markdown_image_on_generate_gives_the_same_tokens(served):
    _, url, model = served
    inputs = f"user : w5 w6 ![]({data_url(PNG)}) w7 assistant : "  # the chat template's text, by hand
    body = {"inputs": inputs, "parameters": {"max_new_tokens": MAX_TOKENS, "details": True}}
    r = httpx.post(url + "/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    tokens = [t["text"] for t in r.json()["details"]["tokens"]]
    assert [t.strip() for t in tokens] == _reference(model, "w5 w6", "w7")


def test_responses_and_messages_images_give_chat_completions_greedy_text(served):
    client, url, _ = served
    chat = client.chat.completions.create(
        model="tgi",
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "w5 w6"},
            {"type": "image_url", "image_url": {"url": data_url(PNG)}},
            {"type": "text", "text": "w7"},
        ]}],
        max_tokens=MAX_TOKENS,
        temperature=0,
    )  # fmt: skip
    parts = [
        {"type": "input_text", "text": "w5 w6"},
        {"type": "input_image", "image_url": data_url(PNG), "detail": "auto"},
        {"type": "input_text", "text": "w7"},
    ]
    response = client.responses.create(
        model="tgi", input=[{"role": "user", "content": parts}], max_output_tokens=MAX_TOKENS, temperature=0
    )
    assert chat.choices[0].message.content and response.output_text == chat.choices[0].message.content
    usage = (response.usage.input_tokens, response.usage.output_tokens)
    assert usage == (chat.usage.prompt_tokens, chat.usage.completion_tokens)
    messages = anthropic.Anthropic(base_url=url, api_key="-", timeout=120, max_retries=0).messages
    image = {"type": "base64", "media_type": "image/png", "data": base64.b64encode(PNG).decode()}
    blocks = [
        {"type": "text", "text": "w5 w6"},
        {"type": "image", "source": image},
        {"type": "text", "text": "w7"},
    ]
    reply = messages.create(
        model="tgi",
        max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": blocks}],
        extra_body={"temperature": 0},  # the 2.x client has no sampling arguments
    )
    assert reply.content[0].text == chat.choices[0].message.content
    assert reply.usage.output_tokens == chat.usage.completion_tokens
    assert reply.usage.input_tokens + (reply.usage.cache_read_input_tokens or 0) == chat.usage.prompt_tokens
    counts = [
        messages.count_tokens(model="tgi", messages=[{"role": "user", "content": c}]).input_tokens
        for c in (blocks, [*blocks[:2], *blocks[1:]])
    ]
    assert counts == [chat.usage.prompt_tokens, chat.usage.prompt_tokens + 4]  # 4 placeholders an image
