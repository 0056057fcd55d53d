"""`ServingEngine` is the whole engine surface the server reads: the real engine and the fake both have every
member, and no module of the server reaches past it with `getattr`/`hasattr`."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from fake_engine import FakeEngine
from tgi.core.async_engine import AsyncEngine
from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.testing.model import write_tiny_llama
from tgi.server.service import protocol
from tgi.server.service.protocol import ServingEngine

SERVER = Path(protocol.__file__).parent


def _members() -> tuple[set[str], dict[str, inspect.Signature]]:
    """The protocol's attributes, and its methods with their signatures."""
    methods = {
        name: inspect.signature(value)
        for name, value in vars(ServingEngine).items()
        if callable(value) and not name.startswith("_")
    }
    return set(ServingEngine.__annotations__), methods


@pytest.fixture(scope="module")
def real_engine(tmp_path_factory) -> AsyncEngine:
    model = write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
    config = EngineConfig(
        model_id=str(model), backend="cpu", dtype="float32", max_total_tokens=64,
        max_batch_total_tokens=256, max_batch_prefill_tokens=64,
    )  # fmt: skip
    return AsyncEngine(LLMEngine.from_config(config))


@pytest.mark.parametrize("which", ["fake", "real"])
def test_the_fake_and_the_real_engine_have_every_member_of_the_protocol(which, request):
    engine = FakeEngine() if which == "fake" else request.getfixturevalue("real_engine")
    attributes, methods = _members()
    assert {"model_info", "speculation", "kernels", "healthy", "validate", "stream_validated"} <= (
        attributes | set(methods)
    )
    missing = [name for name in sorted(attributes | set(methods)) if not hasattr(engine, name)]
    assert missing == [], f"{type(engine).__name__} lacks {missing}"
    assert isinstance(engine, ServingEngine)
    for name, expected in methods.items():
        got = inspect.signature(getattr(engine, name))
        assert list(got.parameters) == [p for p in expected.parameters if p != "self"], name
        assert inspect.iscoroutinefunction(getattr(engine, name)) == inspect.iscoroutinefunction(
            getattr(ServingEngine, name)
        ), name
    info = engine.model_info
    assert isinstance(info.dtype, str) and isinstance(info.lora_adapters, tuple)
    assert engine.healthy is True and engine.error is None and isinstance(engine.kernels, dict)


# a `getattr(`/`hasattr(` whose object is the engine or something read from it
_REACHING = re.compile(
    r"\b(?:getattr|hasattr)\(\s*[\w.]*(?:engine|model_info|cfg|config|tokenizer)\b", re.IGNORECASE
)


def test_no_module_of_the_server_reads_the_engine_with_getattr():
    found = [
        f"{path.relative_to(SERVER)}:{n}: {line.strip()}"
        for path in sorted(SERVER.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if _REACHING.search(line)
    ]
    assert found == []
