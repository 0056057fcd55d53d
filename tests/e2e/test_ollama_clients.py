"""The official `ollama` client against a real server (the shared float32 one, tests/e2e/conftest.py: these
tests only send requests): the model listed, shown and loaded as Ollama describes its models, `/api/version`,
`generate` with `raw=True` equal to TGI's own `/generate` greedy text on the same server, `chat` streamed
equal to `chat` whole, `format` with a JSON schema whose answer validates, and Ollama's errors (an unknown
model's 404, an unknown option named in the 400)."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

pytestmark = pytest.mark.e2e

GREEDY = {"temperature": 0, "num_predict": 12}
ASK = [{"role": "user", "content": "What is the capital of France?"}]
PLACE = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "country": {"type": "string", "maxLength": 20},
    },
    "required": ["city", "country"],
}


@pytest.fixture(scope="module")
def client(server):
    import ollama

    return ollama.Client(host=server.url, timeout=120)


@pytest.fixture(scope="module")
def model(client) -> str:
    [listed] = client.list().models
    return listed.model


def test_list_show_ps_version(client, model, server):
    [listed] = client.list().models
    assert model.endswith(":latest") and listed.size > 0 and len(listed.digest) == 64
    assert listed.details.format == "gguf" and listed.details.family == "llama"
    assert listed.details.parameter_size.endswith("M")
    shown = client.show(model)
    assert "completion" in shown.capabilities and "tools" in shown.capabilities
    assert "vision" not in shown.capabilities and shown.template and shown.details == listed.details
    assert shown.modelinfo["general.architecture"] == "llama"
    [loaded] = client.ps().models
    assert loaded.model == model and loaded.context_length == 1024
    assert httpx.get(server.url + "/api/version").json()["version"]


def test_raw_generate_is_tgis_greedy_text(client, model, server):
    prompt = "The capital of France is"
    answer = client.generate(model=model, prompt=prompt, raw=True, options=GREEDY)
    tgi = httpx.post(
        server.url + "/generate", json={"inputs": prompt, "parameters": {"max_new_tokens": 12}}, timeout=120
    ).json()
    assert answer.response == tgi["generated_text"] and answer.response
    assert answer.done and answer.done_reason == "length" and answer.eval_count == 12
    assert answer.prompt_eval_count > 0 and answer.total_duration >= answer.eval_duration > 0


def test_chat_streamed_is_chat_whole(client, model):
    whole = client.chat(model=model, messages=ASK, options=GREEDY)
    chunks = list(client.chat(model=model, messages=ASK, options=GREEDY, stream=True))
    assert all(not c.done for c in chunks[:-1]) and chunks[-1].done
    assert "".join(c.message.content for c in chunks) == whole.message.content != ""
    assert chunks[-1].eval_count == whole.eval_count and chunks[-1].done_reason == whole.done_reason
    assert chunks[-1].prompt_eval_count == whole.prompt_eval_count


def test_format_with_a_json_schema(client, model):
    answer = client.chat(
        model=model,
        messages=[{"role": "user", "content": "Name a city and its country as JSON."}],
        format=PLACE,
        options={"temperature": 0, "num_predict": 64},
    )
    jsonschema.validate(json.loads(answer.message.content), PLACE)


def test_an_unknown_model_is_a_404(client):
    import ollama

    with pytest.raises(ollama.ResponseError) as caught:
        client.chat(model="llama3:8b", messages=ASK)
    assert caught.value.status_code == 404 and "llama3:8b" in caught.value.error


def test_an_unknown_option_is_refused_by_name(client, model):
    import ollama

    with pytest.raises(ollama.ResponseError) as caught:
        client.generate(model=model, prompt="Hi", options={"num_predict": 4, "bogus_option": 1})
    assert caught.value.status_code == 400 and "options.bogus_option" in caught.value.error
