"""LoRA adapters through a real `tgi launch --lora-adapters` on a tiny random Llama with two peft adapters:
TGI's `adapter_id` (through huggingface_hub's `InferenceClient.text_generation`, the official client that
sends it; `text-generation` 0.7 has no such parameter) gives transformers + peft's greedy tokens; the official
`openai` client selects the same adapter by `model` and gets the same text; `/v1/models` lists the base model
and the adapters; an unknown adapter is a 422 on TGI's routes and OpenAI's 404 `model_not_found` on /v1."""

from __future__ import annotations

import httpx
import huggingface_hub
import openai
import pytest
from huggingface_hub import InferenceClient

from tgi.core.testing.lora import peft_greedy, write_random_lora
from tgi.core.testing.model import write_tiny_llama

N = 6
PROMPT = "a b c d e f g"


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory, launch_server, stop_server):
    root = tmp_path_factory.mktemp("lora-e2e")
    base = write_tiny_llama(root / "base")
    adapters = {
        "alpha": write_random_lora(root / "alpha", base, seed=11),
        "beta": write_random_lora(root / "beta", base, r=4, target_modules=("q_proj", "down_proj"), seed=12),
    }
    flags = ",".join(f"{name}={path}" for name, path in adapters.items())
    server = launch_server(
        root, "--model-id", str(base), "--backend", "cpu", "--dtype", "float32", "--max-total-tokens", "128",
        "--lora-adapters", flags,
    )  # fmt: skip
    yield server, base, adapters
    assert stop_server(server) == 0, server.logs()


def test_adapter_id_and_model_select_adapters(lora_server, monkeypatch):
    server, base, adapters = lora_server
    # HF_HUB_OFFLINE (set where tests run) blocks every request of huggingface_hub, a loopback one too
    monkeypatch.setattr(huggingface_hub.constants, "is_offline_mode", lambda: False)
    ids = [t["id"] for t in httpx.post(server.url + "/tokenize", json={"inputs": PROMPT}).json()]
    hub = InferenceClient(base_url=server.url)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    server_name = client.models.list().data[0].id  # the base model's name
    texts = {}
    for adapter in (None, *adapters):
        out = hub.text_generation(PROMPT, max_new_tokens=N, details=True, adapter_id=adapter)
        want = peft_greedy(base, None if adapter is None else adapters[adapter], [ids], N)[0]
        assert [t.id for t in out.details.tokens] == want, f"adapter {adapter}"
        texts[adapter] = out.generated_text
        model = adapter or "tgi"
        chosen = client.completions.create(model=model, prompt=PROMPT, max_tokens=N, temperature=0)
        assert chosen.choices[0].text == out.generated_text, f"model {model}"
        assert chosen.model == (adapter or server_name)
    assert len(set(texts.values())) == 3, "each adapter changes the output"
    listed = [m.id for m in client.models.list()]
    assert listed[1:] == list(adapters) and len(listed) == 3


def test_unknown_adapter_is_refused(lora_server):
    server, _, _ = lora_server
    r = httpx.post(server.url + "/generate", json={"inputs": PROMPT, "parameters": {"adapter_id": "gamma"}})
    assert r.status_code == 422 and "`gamma` is not a loaded LoRA adapter" in r.json()["error"]
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.NotFoundError) as info:
        client.completions.create(model="gamma", prompt=PROMPT, max_tokens=2)
    assert info.value.body["code"] == "model_not_found"
