"""A real `tgi launch` process on a free port, shared by the e2e tests (started once per session).

The shared server and the in-process reference its greedy texts are held to run in float32: in bfloat16 the
default model's chat answer starts on a near-tie ("The" / "L", 0.08 apart in log p), which the server's warm
prefix cache, its step thread count or a batch beside a request may tip either way (docs/testing.md,
"Near-ties"). The default launch's bfloat16 is served by the other e2e servers, whose tests assert no greedy
text.
"""

from __future__ import annotations

import re

import httpx
import pytest
from e2e_server import SHARED_FLAGS, launch, reference_for, stop


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory):
    s = launch(tmp_path_factory.mktemp("e2e"), *SHARED_FLAGS)
    yield s
    code = stop(s)
    assert code == 0, f"the server exited with {code} on SIGTERM:\n{s.logs()}"


@pytest.fixture(scope="session")
def server(shared_server):
    return shared_server


@pytest.fixture(scope="session")
def reasoning_server(tmp_path_factory):
    """`tgi launch --reasoning-parser deepseek_r1` on a tiny random model whose chat template opens `<think>`
    as DeepSeek-R1's does (`helpers.reasoning_model`), float32, 512 total tokens: one server, started when a
    test first asks for it, for every file that reads its reasoning with these flags (Anthropic Messages,
    OpenAI Responses). Its tests only send requests: none changes what the server serves."""
    from helpers.reasoning_model import save_reasoning_model

    root = tmp_path_factory.mktemp("reasoning-e2e")
    model = save_reasoning_model(root / "model")
    s = launch(
        root, "--model-id", str(model), "--backend", "cpu", "--dtype", "float32", "--max-total-tokens", "512",
        "--reasoning-parser", "deepseek_r1",
    )  # fmt: skip
    yield s
    code = stop(s)
    assert code == 0, f"the server exited with {code} on SIGTERM:\n{s.logs()}"


@pytest.fixture(scope="session")
def reference():
    """Greedy text of the in-process engine with the shared server's settings (float32)."""
    return reference_for("float32")


@pytest.fixture(scope="session")
def launch_server():
    """`launch(tmp_path, *extra_flags)`: a server of one's own (stop it with `stop_server`)."""
    return launch


@pytest.fixture(scope="session")
def stop_server():
    return stop


@pytest.fixture(scope="session")
def get_metrics():
    """`get_metrics(url)`: /metrics as {"name{labels}": value}."""
    return metrics


def metrics(url: str, headers: dict | None = None) -> dict[str, float]:
    text = httpx.get(url + "/metrics", headers=headers or {}).text
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"^([a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$", text, re.M)
    }
