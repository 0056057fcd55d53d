"""Each native vision-language architecture beyond LLaVA through a real `tgi launch` of its tiny random
checkpoint (`tgi.core.testing`) with the official `openai` client: a data-URL image in a chat completion gives
transformers' greedy tokens on the same weights and processor, and `usage` counts the image's placeholder
tokens as the processor expands them. One server per architecture (module-scoped, float32), two requests each."""

from __future__ import annotations

import io

import httpx
import openai
import pytest
import torch
from helpers.image_files import data_url, image_bytes
from PIL import Image

from tgi.core.testing.tiny_gemma3 import save_random_gemma3
from tgi.core.testing.tiny_idefics3 import save_random_idefics3
from tgi.core.testing.tiny_llava_next import save_random_llava_next
from tgi.core.testing.tiny_qwen2_vl import save_random_qwen2_vl
from tgi.server.images.processor import load_processor

pytestmark = pytest.mark.e2e

PNG = image_bytes(60, 40, color=(10, 200, 90))
MAX_TOKENS = 8
CHECKPOINTS = {
    "qwen2-vl": save_random_qwen2_vl,
    "idefics3": save_random_idefics3,
    "llava-next": save_random_llava_next,
    "gemma3": save_random_gemma3,  # an image's tokens attend to each other both ways
}


@pytest.fixture(scope="module", params=sorted(CHECKPOINTS))
def served(request, tmp_path_factory, launch_server, stop_server):
    root = tmp_path_factory.mktemp(f"{request.param}-e2e")
    model = CHECKPOINTS[request.param](root / "model")
    server = launch_server(
        root, "--model-id", str(model), "--backend", "cpu", "--dtype", "float32", "--max-total-tokens", "512"
    )  # fmt: skip
    yield openai.OpenAI(base_url=server.url + "/v1", api_key="-", max_retries=0), server.url, str(model)
    assert stop_server(server) == 0, server.logs()


def _reference(model: str, content: list[dict]) -> tuple[list[str], list[int], int]:
    """transformers' greedy tokens after the chat prompt of `content` (one image), the prompt's ids as the
    processor expands them and how many of its tokens are the image's placeholders."""
    from transformers import AutoModelForImageTextToText

    processor = load_processor(model)
    prompt = processor.tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    image = Image.open(io.BytesIO(PNG)).convert("RGB")
    inputs = processor(text=[prompt], images=[image], return_tensors="pt", add_special_tokens=False)
    hf = AutoModelForImageTextToText.from_pretrained(model, dtype=torch.float32).eval()
    with torch.no_grad():
        out = hf.generate(**inputs, max_new_tokens=MAX_TOKENS, do_sample=False)
    ids = inputs["input_ids"][0]
    placeholders = int((ids == hf.config.image_token_id).sum())
    new = out[0, ids.shape[0] :].tolist()
    return processor.tokenizer.convert_ids_to_tokens(new), ids.tolist(), placeholders


PARTS = [
    {"type": "text", "text": "w5 w6"},
    {"type": "image_url", "image_url": {"url": data_url(PNG)}},
    {"type": "text", "text": "w7"},
]
CONTENT = [{"type": "text", "text": "w5 w6"}, {"type": "image"}, {"type": "text", "text": "w7"}]


def test_a_data_url_image_gives_transformers_greedy_tokens_and_counts_its_tokens(served):
    client, _, model = served
    reply = client.chat.completions.create(
        model="tgi",
        messages=[{"role": "user", "content": PARTS}],
        max_tokens=MAX_TOKENS,
        temperature=0,
        logprobs=True,
    )
    tokens, prompt_ids, placeholders = _reference(model, CONTENT)
    assert [t.token for t in reply.choices[0].logprobs.content] == tokens
    assert placeholders >= 4 and reply.usage.prompt_tokens == len(prompt_ids)  # the placeholders counted


def test_chat_tokenize_lists_the_prompt_as_the_processor_expands_it(served):
    """Every token the model gets, in order: the image's placeholders and, for Idefics3, each tile's
    `<fake_token_around_image><row_r_col_c>` markers and newlines the processor writes around them."""
    _, url, model = served
    tokenized = httpx.post(url + "/chat_tokenize", json={"messages": [{"role": "user", "content": PARTS}]})
    spans = tokenized.json()["tokenize_response"]
    assert [span["id"] for span in spans] == _reference(model, CONTENT)[1]
