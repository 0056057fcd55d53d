"""Two models on one real `tgi launch` with `--max-loaded-models 1` (a `--model-id`, and a `--models-dir`
holding the other, served by its folder's name): both listed (OpenAI's `/v1/models`, Ollama's `/api/tags`),
each answering by its name through the official `openai` and `ollama` clients, TGI's route on the first, an
unknown name a 404 listing what is served, the second model loaded at its first request and the first
unloaded (`/api/ps`, `/metrics`' samples per model; the process back within 10 % of one model's RSS), and
each model's greedy text the same after being unloaded and loaded again (float32, one process's kernels)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import openai
import pytest
from process_memory import rss_mib

from tgi.core.testing.tiny_models import save_random_model

pytestmark = pytest.mark.e2e

# ~55M parameters each (~220 MB of float32 weights): a model left loaded shows well above the RSS noise
SHAPE = dict(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_layers=8, num_heads=8)
UNLOADED = "unloaded "


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("several-models")
    for seed, name in enumerate(("a", "more/b")):
        save_random_model(folder / name, **SHAPE, max_position_embeddings=1024, init_std=0.5, seed=seed)
    return folder


@pytest.fixture(scope="module")
def models(folder) -> tuple[str, str]:
    """The names the server serves them by: the `--model-id` as given, the folder's model by its name."""
    return str(folder / "a"), "b"


@pytest.fixture(scope="module")
def server(launch_server, stop_server, tmp_path_factory, folder, models):
    a, _ = models
    s = launch_server(
        tmp_path_factory.mktemp("several-models-server"), "--model-id", a, "--models-dir", str(folder / "more"),
        "--max-loaded-models", "1", "--dtype", "float32", "--max-batch-total-tokens", "4096",
    )  # fmt: skip
    yield s
    stop_server(s)


def complete(server, model: str) -> str:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    answer = client.completions.create(model=model, prompt="w5 w6 w7", max_tokens=8, temperature=0)
    assert answer.model == model
    return answer.choices[0].text


def wait_unloaded(server, times: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while server.stderr.read_text().count(UNLOADED) < times:
        assert time.monotonic() < deadline, f"no '{UNLOADED}' #{times}:\n{server.logs()}"
        time.sleep(0.2)


def test_both_listed_each_answers_by_name_and_one_stays_loaded(server, models, get_metrics):
    import ollama

    a, b = models
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list().data] == [a, b]
    local = ollama.Client(host=server.url, timeout=120)
    assert [m.model for m in local.list().models] == [f"{a}:latest", f"{b}:latest"]

    text_a = complete(server, a)
    one_model = rss_mib(server.proc.pid)
    text_b = complete(server, b)  # loads b, unloading a
    wait_unloaded(server, 1)
    assert text_b != text_a
    assert [m.model for m in local.ps().models] == [f"{b}:latest"]
    after_switch = rss_mib(server.proc.pid)
    generated = httpx.post(
        server.url + "/generate",
        json={"inputs": "w5 w6 w7", "parameters": {"max_new_tokens": 8}},
        timeout=120,
    )  # TGI's route: the first model, loaded again
    assert generated.status_code == 200, generated.text
    wait_unloaded(server, 2)
    assert complete(server, a) == text_a
    assert [m.model for m in local.ps().models] == [f"{a}:latest"]
    again = local.generate(
        model=f"{b}:latest", prompt="w5 w6 w7", raw=True, options={"num_predict": 8, "temperature": 0}
    )
    assert again.response == text_b  # Ollama's spelling of b's name; b loaded again
    assert complete(server, b) == text_b
    assert abs(after_switch - one_model) <= 0.1 * one_model, (one_model, after_switch)
    scraped = get_metrics(server.url)  # the engines' figures per model loaded: b only, now
    assert scraped[f'tgi_kv_total_blocks{{model_name="{b}"}}'] > 0
    assert scraped[f'tgi_prefill_tokens_total{{model_name="{b}"}}'] > 0
    assert not [k for k in scraped if f'model_name="{a}"' in k]


def test_an_unknown_name_is_a_404_listing_the_models_and_tgi_names_the_default(server, models):
    import ollama

    a, b = models
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError) as refused:
        client.completions.create(model="no/such-model", prompt="w5", max_tokens=2)
    assert "no/such-model" in str(refused.value) and a in str(refused.value) and b in str(refused.value)
    with pytest.raises(ollama.ResponseError) as ollama_refused:
        ollama.Client(host=server.url, timeout=120).generate(model="no/such-model", prompt="w5")
    assert ollama_refused.value.status_code == 404 and b in ollama_refused.value.error
    default = client.completions.create(model="tgi", prompt="w5", max_tokens=2)  # TGI's name: the default
    assert default.model == a
