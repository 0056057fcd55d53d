"""--trust-remote-code on a real `tgi launch` with a checkpoint of custom code (src/tgi/core/testing/remote_code.py):
without the flag the start stops with exit 2 naming it; with it (as TRUST_REMOTE_CODE=true) the log says
the model runs on the transformers fallback with the checkpoint's code, and /generate gives transformers'
greedy tokens (`trust_remote_code=True`)."""

from __future__ import annotations

import sys

import httpx
import pytest
import torch
from e2e_server import launch_env, run_command

from tgi.core.testing.remote_code import ARCHITECTURE, save_remote_code_checkpoint

pytestmark = pytest.mark.e2e

N = 6
PROMPT = "w5 w17 w99 w4 w250 w8 w31"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_remote_code_checkpoint(tmp_path_factory.mktemp("remote-e2e") / "custom")


def _launch_cmd(folder) -> list[str]:
    return [
        sys.executable, "-m", "tgi.server.cli.main", "launch", "--port", "0", "--hostname", "127.0.0.1",
        "--model-id", str(folder), "--backend", "cpu", "--dtype", "float32", "--max-total-tokens", "128",
    ]  # fmt: skip


def test_without_the_flag_the_start_stops_naming_it(checkpoint, tmp_path):
    env = {k: v for k, v in launch_env().items() if k != "TRUST_REMOTE_CODE"}
    done = run_command(tmp_path, *_launch_cmd(checkpoint)[3:], env=env)
    assert done.returncode == 2, done.stderr
    assert "--trust-remote-code (TRUST_REMOTE_CODE=true)" in done.stderr, done.stderr


def test_with_the_variable_the_fallback_serves_the_checkpoint_code(
    checkpoint, tmp_path, launch_server, stop_server, monkeypatch
):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ids = AutoTokenizer.from_pretrained(checkpoint)(PROMPT, add_special_tokens=False)["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32, trust_remote_code=True)
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), do_sample=False,
            max_new_tokens=N, min_new_tokens=N,
        )  # fmt: skip
    expected = out[0, len(ids) :].tolist()

    monkeypatch.setenv("TRUST_REMOTE_CODE", "true")
    server = launch_server(
        tmp_path, "--model-id", str(checkpoint), "--backend", "cpu", "--dtype", "float32",
        "--max-total-tokens", "128",
    )  # fmt: skip
    try:
        body = {"inputs": PROMPT, "parameters": {"max_new_tokens": N, "details": True}}
        details = httpx.post(server.url + "/generate", json=body, timeout=60).json()["details"]
    finally:
        assert stop_server(server) == 0, server.logs()
    assert (
        f"weights loaded: {ARCHITECTURE} (transformers fallback with the checkpoint's code)" in server.logs()
    )
    assert [t["id"] for t in details["tokens"]] == expected
