"""`tgi launch --pipeline-parallel-size 2`: a server whose two pipeline stages (two processes) give the
greedy tokens of one process, on /generate and streamed on /v1/completions, and that stops with code 0
leaving no rank behind."""

from __future__ import annotations

import json

import httpx
import psutil
import pytest
from e2e_server import launch, stop

from tgi.core.testing.tiny_models import save_random_model

pytestmark = pytest.mark.e2e

PROMPT = "a b c d e f g"
N = 10


def test_two_stages_serve_one_process_tokens(tmp_path):
    model = save_random_model(
        tmp_path / "llama", "llama", num_layers=3, init_std=0.08, max_position_embeddings=2048
    )
    server = launch(tmp_path, "--model-id", str(model), "--pipeline-parallel-size", "2", "--dtype", "float32")
    try:
        ranks = psutil.Process(server.proc.pid).children(recursive=True)
        from tgi.core.config import EngineConfig
        from tgi.core.engine import LLMEngine
        from tgi.core.sampling_params import SamplingParams

        engine = LLMEngine.from_config(
            EngineConfig(
                model_id=str(model), dtype="float32", max_batch_total_tokens=2048, max_total_tokens=1024
            )
        )
        try:
            [ref] = engine.generate([PROMPT], SamplingParams(max_new_tokens=N))
        finally:
            engine.runner.shutdown()
        out = httpx.post(
            server.url + "/generate",
            json={"inputs": PROMPT, "parameters": {"max_new_tokens": N, "details": True}},
            timeout=60,
        ).json()
        assert [t["id"] for t in out["details"]["tokens"]] == list(ref.token_ids), out
        body = {"model": "tgi", "prompt": PROMPT, "max_tokens": N, "temperature": 0, "stream": True}
        text = ""
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data:") and line != "data: [DONE]":
                    text += json.loads(line[5:])["choices"][0]["text"]
        assert text == ref.generated_text
    finally:
        assert stop(server) == 0, server.logs()
    _, alive = psutil.wait_procs(ranks, timeout=15)  # the ranks and their fork server end with the server
    assert not alive, alive
