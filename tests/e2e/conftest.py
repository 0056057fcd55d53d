"""A real `tgi launch` process on a free port, shared by the e2e tests (started once per session).

The shared server and the in-process reference its greedy texts are held to run in float32 with
`--deterministic`: in bfloat16 the default model's chat answer starts on a near-tie ("The" / "L", 0.08 apart
in log p), which the server's warm prefix cache, its chunking or a batch beside a request may tip either way
(docs/testing.md, "Near-ties"), and the batch-invariant kernels give the same bits in the server and in the
reference whatever runs beside (one machine, one thread count: both take the worker's OMP_NUM_THREADS). In
this mode a float32 model computes on the GGUF blocks (the float32 block kernel, every CPU kind) instead of
dense float32 weights: it decoded at 2.2x plain float32's speed here (Intel Xeon, one thread). The default
launch's bfloat16 is served by the other e2e servers, whose tests assert no greedy text.
"""

from __future__ import annotations

import re

import httpx
import pytest
from e2e_server import (
    KEYED_FLAGS,
    REASONING_ADMIN_KEY,
    REASONING_TEMPLATE,
    SHARED_FLAGS,
    SHARED_REFERENCE,
    TENANT_KEYS,
    launch,
    reference_for,
    stop,
)


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
def reasoning_models(tmp_path_factory):
    """(the reasoning model, a plain one): tiny random Llamas; the first with `REASONING_TEMPLATE`
    (`helpers.reasoning_model`), the second with no chat template (it cannot reason in `<think>`)."""
    from helpers.reasoning_model import save_reasoning_model

    from tgi.core.testing.tiny_models import save_random_model

    root = tmp_path_factory.mktemp("reasoning-models")
    return save_reasoning_model(root / "model", REASONING_TEMPLATE), save_random_model(root / "plain")


@pytest.fixture(scope="session")
def reasoning_server(tmp_path_factory, reasoning_models):
    """`tgi launch --reasoning-parser deepseek_r1 --tool-call-parser auto` on a tiny random model whose chat
    template opens `<think>` as DeepSeek-R1's does and teaches Hermes tool calls (`REASONING_TEMPLATE`),
    float32, 512 total tokens, with `--enable-model-swap` to the plain model of `reasoning_models` (which the
    reasoning parser refuses: test_reasoning_e2e.py): one server, started when a test first asks for it, for
    every file that reads its reasoning with these flags (chat completions, Anthropic Messages, OpenAI
    Responses). Its tests only send requests: none changes what the server serves."""
    model, plain = reasoning_models
    s = launch(
        tmp_path_factory.mktemp("reasoning-e2e"), "--model-id", str(model), "--backend", "cpu",
        "--dtype", "float32", "--max-total-tokens", "512", "--reasoning-parser", "deepseek_r1",
        "--tool-call-parser", "auto", "--enable-model-swap", "--admin-api-key", REASONING_ADMIN_KEY,
        "--swappable-models", str(plain),
    )  # fmt: skip
    yield s
    code = stop(s)
    assert code == 0, f"the server exited with {code} on SIGTERM:\n{s.logs()}"


@pytest.fixture(scope="session")
def keyed_server(tmp_path_factory):
    """`tgi launch --api-key s3cret --max-batch-size 1 --stream-write-timeout 2` (`KEYED_FLAGS`) and an
    `--api-key-file` of two tenants (`TENANT_KEYS`) on the default model: one server for the tests of these
    flags that only send requests (the key's headers, a request queued behind the one running sequence, a
    stalled reader cancelled, tenants kept apart); every request takes a key. Each test leaves it idle, every
    KV block free."""
    root = tmp_path_factory.mktemp("keyed-e2e")
    (root / "api-keys.txt").write_text(TENANT_KEYS)
    s = launch(root, *KEYED_FLAGS, "--api-key-file", str(root / "api-keys.txt"))
    yield s
    code = stop(s)
    assert code == 0, f"the server exited with {code} on SIGTERM:\n{s.logs()}"


@pytest.fixture(scope="session")
def reference():
    """Greedy text of the in-process engine with the shared server's settings (`--deterministic`)."""
    return reference_for(**SHARED_REFERENCE)


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
