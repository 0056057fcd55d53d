"""No Triton kernel compiles while serving: every kernel variant a step launches was launched at warm-up.

A Triton kernel compiles once per variant: its constexpr arguments, `num_warps`/`num_stages`, its tensors'
dtypes and the specialisation of its integer arguments (equal to 1, divisible by 16, neither) unless
`do_not_specialize` names them. A variant first seen while serving stalls that step for about a second on
a GPU. Here a tiny Llama is served by the CUDA backend on CPU tensors (Triton interpreted), with decode
splits every 4 keys so that short contexts take 1 to 16 splits; the variants launched while the engine
starts (weights, profile, warm-up) and while it serves requests of many lengths are recorded as a GPU's
JIT would key them, and the second set must be within the first."""

from __future__ import annotations

import contextlib
import os

import pytest
import torch

if torch.cuda.is_available():
    pytest.skip("a GPU is visible: the kernels are not interpreted", allow_module_level=True)
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("TRITON_INTERPRET=1 was not set before triton was imported", allow_module_level=True)
pytest.importorskip("triton", reason="triton is not installed (pip install triton; CI installs it)")

from interpreted_cuda import InterpretedCudaBackend
from triton.runtime.interpreter import InterpretedFunction

from tgi.backends.triton_common.attention import TritonAttention
from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import backend_registry, write_tiny_llama


def _int_class(value: int) -> str:
    return "=1" if value == 1 else "%16" if value % 16 == 0 else "any"


def variant_of(kernel: InterpretedFunction, args: tuple, kwargs: dict) -> tuple:
    """What a GPU's JIT keys a compiled kernel by (pointer alignment aside)."""
    fixed = set(kernel.kwargs.get("do_not_specialize") or ())
    key: list = [kernel.__name__]
    for name, arg in zip(kernel.arg_names, args, strict=False):
        if isinstance(arg, torch.Tensor):
            key.append((name, str(arg.dtype)))
        elif isinstance(arg, int) and not isinstance(arg, bool) and name not in fixed:
            key.append((name, _int_class(arg)))
    key.extend(sorted((k, repr(v)) for k, v in kwargs.items()))
    return tuple(key)


@contextlib.contextmanager
def recording_variants(into: set):
    run = InterpretedFunction.run

    def record(self, *args, grid, warmup, **kwargs):
        into.add(variant_of(self, args, kwargs))
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = record
    try:
        yield
    finally:
        InterpretedFunction.run = run


class ManySplitsBackend(InterpretedCudaBackend):
    """Decode splits every 4 keys (at most 16): contexts of 4 to 64 keys take every split count."""

    def create_attention(self, name):
        return TritonAttention(min_tokens_per_split=4)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("variants") / "llama")


def test_serving_launches_only_variants_compiled_at_warm_up(tiny_llama):
    config = EngineConfig(
        model_id=str(tiny_llama), backend="cuda-interpreted", dtype="float32", block_size=4,
        max_total_tokens=96, max_batch_total_tokens=512, max_batch_prefill_tokens=32, max_num_seqs=4,
    )  # fmt: skip
    at_start: set = set()
    with recording_variants(at_start):
        engine = LLMEngine.from_config(
            config, registry=backend_registry("cuda-interpreted", ManySplitsBackend)
        )
    serving: set = set()
    prompt = lambda n: list(range(3, 3 + n))  # noqa: E731
    with recording_variants(serving):
        engine.generate([prompt(5)], SamplingParams(max_new_tokens=6, ignore_eos=True))  # alone: 1, 2 splits
        batch = [prompt(n) for n in (17, 40, 70)]  # decodes beside chunked prefills: 4, 8, 16 splits
        engine.generate(batch, SamplingParams(max_new_tokens=4, ignore_eos=True))
    assert serving - at_start == set(), "compiled while serving"
    splits = {dict(v[1:])["NUM_SPLITS"] for v in serving if v[0] == "_decode_split_kernel"}
    assert splits == {"1", "2", "4", "8", "16"}, "the requests took every split count"
