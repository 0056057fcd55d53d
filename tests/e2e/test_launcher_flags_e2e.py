"""TGI's launcher flags on a real `tgi launch`: the served ones change what the server does, a
refused one or one the backend cannot honour stops the start with exit 2 and its name
(--trust-remote-code: test_trust_remote_code_e2e.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest
from e2e_server import SHARED_FLAGS

pytestmark = pytest.mark.e2e

PROMPT = "The capital of France is"
MESSAGES = [{"role": "user", "content": "Hi"}]


def test_served_flags_change_the_server(tmp_path, shared_server, launch_server, stop_server):
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": "[{{ messages[0]['content'] }}]"}))
    flags = [
        "--tokenizer-config-path", str(config), "--cors-allow-origin", "https://app.example",
        "--rope-factor", "2", "--validation-workers", "1", "--usage-stats", "off",
        "--cuda-memory-fraction", "0.9", "--env", *SHARED_FLAGS,  # the shared server's dtype: compared below
    ]  # fmt: skip
    server = launch_server(tmp_path, *flags)
    try:
        tokenized = httpx.post(server.url + "/chat_tokenize", json={"messages": MESSAGES}, timeout=60).json()
        assert tokenized["templated_text"] == "[Hi]"
        preflight = httpx.options(
            server.url + "/v1/chat/completions",
            headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"},
        )
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        assert httpx.get(server.url + "/info").json()["validation_workers"] == 1
        body = {
            "inputs": PROMPT,
            "parameters": {"max_new_tokens": 1, "details": True, "decoder_input_details": True},
        }
        scaled = httpx.post(server.url + "/generate", json=body, timeout=60).json()["details"]["prefill"]
        plain = httpx.post(shared_server.url + "/generate", json=body, timeout=60).json()["details"][
            "prefill"
        ]
    finally:
        assert stop_server(server) == 0, server.logs()
    assert "Python: " in server.logs()  # --env
    # positions divided by 2: the same tokens, other logprobs once a token attends to another position
    # (the second token's comes from the first one alone, at position 0, which no scaling moves)
    assert [t["id"] for t in scaled] == [t["id"] for t in plain]
    assert all(abs(a["logprob"] - b["logprob"]) > 1e-4 for a, b in zip(scaled[2:], plain[2:], strict=True))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--cuda-graphs", "1,2", "--backend", "cpu"],
            "--cuda-graphs: the cpu backend does not capture graphs",
        ),
        (["--max-waiting-tokens", "20"], "--max-waiting-tokens 20 (MAX_WAITING_TOKENS) is not supported"),
    ],
)
def test_flags_that_cannot_be_served_stop_the_start(flags, message):
    cmd = [
        sys.executable,
        "-m",
        "tgi.server.cli.main",
        "launch",
        "--port",
        "0",
        "--hostname",
        "127.0.0.1",
        *flags,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and message in done.stderr, done.stderr
