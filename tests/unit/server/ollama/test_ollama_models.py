"""The served model as Ollama describes it (`/api/tags`, `/api/show`, `/api/ps`, `/api/version`), the routes
not served (501), and the pieces: parameter sizes, families, quantization levels, weight files and digests,
`keep_alive` durations, the error dialect, the grammar-backed tool calls as Ollama's `tool_calls`."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
from fastapi.testclient import TestClient

from fake_engine import FakeEngine
from tgi.core.interfaces.quantization import QuantizationInfo
from tgi.core.request import FinishReason, TokenEvent
from tgi.server.app import create_app
from tgi.server.ollama import models
from tgi.server.ollama.errors import is_ollama_path, ollama_status
from tgi.server.ollama.format import ReplyWriter
from tgi.server.ollama.inputs import keep_alive_seconds, tagged, tool_plan
from tgi.server.service.settings import ServerSettings

MODEL = "fake/model"


@pytest.fixture
def client():
    with TestClient(create_app(FakeEngine())) as c:
        yield c


def test_tags_ps_show_version(client):
    [listed] = client.get("/api/tags").json()["models"]
    assert listed["name"] == listed["model"] == f"{MODEL}:latest"
    assert set(listed) == {"name", "model", "modified_at", "size", "digest", "details"}
    details = listed["details"]
    assert details["family"] == "fake" and details["quantization_level"] == "F32"
    assert set(details) == {
        "parent_model",
        "format",
        "family",
        "families",
        "parameter_size",
        "quantization_level",
    }
    [loaded] = client.get("/api/ps").json()["models"]
    assert loaded["name"] == listed["name"] and loaded["context_length"] == 128 and loaded["size_vram"] == 0
    assert loaded["expires_at"] == models.NEVER
    show = client.post("/api/show", json={"model": f"{MODEL}:latest"}).json()
    assert show["template"] == FakeEngine().tokenizer.chat_template and show["details"] == details
    assert (
        show["model_info"]["general.architecture"] == "fake"
        and show["model_info"]["fake.context_length"] == 128
    )
    assert show["capabilities"] == ["completion", "tools"]
    assert "temperature" in show["parameters"]
    assert client.post("/api/show", json={"name": MODEL}).status_code == 200  # older clients' field
    assert client.get("/api/version").json()["version"]


def test_no_tools_capability_without_grammars(client):
    with TestClient(create_app(FakeEngine(), ServerSettings(disable_grammar_support=True))) as c:
        assert c.post("/api/show", json={"model": MODEL}).json()["capabilities"] == ["completion"]


@pytest.mark.parametrize(
    ("method", "path", "why"),
    [
        ("post", "/api/pull", "model store"),
        ("post", "/api/create", "model store"),
        ("delete", "/api/delete", "model store"),
    ],
)
def test_routes_not_served_say_why(client, method, path, why):
    r = client.request(method.upper(), path, json={"model": MODEL})
    assert r.status_code == 501 and set(r.json()) == {"error"} and why in r.json()["error"]


@pytest.mark.parametrize(("path", "field"), [("/api/embed", "input"), ("/api/embeddings", "prompt")])
def test_embeddings_on_a_generative_model_say_what_it_serves(client, path, field):
    r = client.post(path, json={"model": MODEL, field: "hi"})
    assert r.status_code == 400 and set(r.json()) == {"error"}
    assert "generates text" in r.json()["error"] and "embeddings are not served" in r.json()["error"]


def test_an_unknown_api_route_is_404_in_ollamas_shape(client):
    r = client.get("/api/nothing")
    assert r.status_code == 404 and set(r.json()) == {"error"}


@pytest.mark.parametrize(
    ("n", "shown"),
    [
        (8_000_000_000, "8B"),
        (1_711_376_384, "1.7B"),
        (134_515_008, "134.52M"),
        (135_000_000, "135M"),
        (12_000, "12K"),
        (0, "0"),
    ],
)
def test_human_number(n, shown):
    assert models.human_number(n) == shown


def test_family_and_quantization_level():
    assert models.family("LlamaForCausalLM") == "llama" and models.family("Qwen2ForCausalLM") == "qwen2"
    info = FakeEngine().model_info
    assert models.quantization_level(dataclasses.replace(info, dtype="bfloat16")) == "BF16"
    gguf = QuantizationInfo("gguf", "gguf-q4_1,q6_k", "checkpoint", 30, "cpu", "Q4_1")
    assert models.quantization_level(dataclasses.replace(info, quantization=gguf)) == "Q4_1"


def test_weight_files_size_and_digest(tmp_path):
    import asyncio

    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"GGUF" + bytes(1000))
    assert models.weight_files(str(weights), None) == [weights]
    assert models.weight_files(str(tmp_path), None) == [weights]
    assert asyncio.run(models.digest([weights])) == hashlib.sha256(weights.read_bytes()).hexdigest()
    folder = tmp_path / "st"
    folder.mkdir()
    shards = [folder / "model-00001.safetensors", folder / "model-00002.safetensors"]
    for shard in shards:
        shard.write_bytes(bytes(10))
    assert models.weight_files("org/name", str(folder)) == shards  # a Hub model: its local snapshot
    assert asyncio.run(models.digest(shards)) == ""  # several files: no one digest
    assert models.weight_files("org/name", "") == []


def test_tags_of_a_local_gguf(tmp_path):
    weights = tmp_path / "tiny.gguf"
    weights.write_bytes(b"GGUF" + bytes(100))
    engine = FakeEngine(model_id=str(weights))
    with TestClient(create_app(engine)) as client:
        [listed] = client.get("/api/tags").json()["models"]
    assert listed["size"] == 104 and listed["details"]["format"] == "gguf"
    assert listed["digest"] == hashlib.sha256(weights.read_bytes()).hexdigest()


def test_tagged():
    assert tagged("org/model") == "org/model:latest" and tagged("model:q4") == "model:q4"
    assert tagged("host:5000/model") == "host:5000/model:latest"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        (-1, -1.0),
        ("-1", -1.0),
        ("5m", 300.0),
        ("-1h30m", -5400.0),
        ("1.5s", 1.5),
        ("300ms", 0.3),
    ],
)
def test_keep_alive_seconds(value, seconds):
    assert (
        keep_alive_seconds(value) == pytest.approx(seconds)
        if seconds is not None
        else keep_alive_seconds(value) is None
    )


def test_the_error_dialect():
    assert (
        is_ollama_path("/api/chat")
        and is_ollama_path("//api//tags/")
        and not is_ollama_path("/v1/chat/completions")
    )
    assert (ollama_status(422), ollama_status(429), ollama_status(404), ollama_status(500)) == (
        400,
        503,
        404,
        500,
    )


def _events(pieces: list[str], reason: FinishReason) -> list[TokenEvent]:
    text = "".join(pieces)
    return [
        TokenEvent(
            request_id="r", index=i, token_id=1, token_text=p, text=p, logprob=None, special=False,
            finish_reason=reason if i == len(pieces) - 1 else None,
            generated_text=text if i == len(pieces) - 1 else None,
        )
        for i, p in enumerate(pieces)
    ]  # fmt: skip


TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}  # fmt: skip


def test_grammar_backed_tool_calls_as_ollamas_tool_calls():
    pieces = ['{"name": "get_', 'time", "arguments": ', '{"tz": ', '"CET"}', "}"]
    writer = ReplyWriter(MODEL, 10, 0, chat=True, plan=tool_plan([TIME]))
    out = [line for e in _events(pieces, FinishReason.EOS) for line in writer.feed(e)]
    call = {"function": {"index": 0, "name": "get_time", "arguments": {"tz": "CET"}}}
    assert [line["message"].get("tool_calls") for line in out] == [[call], None]
    assert all(line["message"]["content"] == "" for line in out)
    assert writer.whole()["message"] == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert out[-1]["done"] and out[-1]["done_reason"] == "stop" and out[-1]["eval_count"] == len(pieces)


def test_a_call_cut_short_is_the_text_it_is():
    pieces = ['{"name": "get_time", "arguments": ', '{"tz": "C']
    writer = ReplyWriter(MODEL, 10, 0, chat=True, plan=tool_plan([TIME]))
    for e in _events(pieces, FinishReason.LENGTH):
        writer.feed(e)
    body = writer.whole()
    assert (
        body["message"] == {"role": "assistant", "content": "".join(pieces)}
        and body["done_reason"] == "length"
    )


def test_a_text_answer_with_tools_offered():
    pieces = ["It is ", "noon."]
    writer = ReplyWriter(MODEL, 10, 0, chat=True, plan=tool_plan([TIME]))
    for e in _events(pieces, FinishReason.EOS):
        writer.feed(e)
    assert writer.whole()["message"] == {"role": "assistant", "content": "It is noon."}
    assert json.dumps(writer.whole())  # JSON all through
