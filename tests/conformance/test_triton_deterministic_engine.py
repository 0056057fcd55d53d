"""`--deterministic` on the Triton backends, through a real `LLMEngine` serving a tiny random Llama (hidden
64, 2 layers) on `CudaBackend` with CPU tensors, every kernel run by triton's interpreter
(`TRITON_INTERPRET=1`, set by tests/conftest.py): one greedy and one seeded sampled request give the same
token ids alone, beside 3 other requests of mixed lengths (their prefills chunked by a 16-token step budget,
so the target's 12-token prompt is cut elsewhere), and after preemptions (a KV cache of 48 tokens), in
bfloat16; the conformance suite's test of the mode (tests/conformance/test_triton_interpret.py) checks the
same and the prefix cache in float32. Before the Triton backends had batch-invariant kernels the engine
refused the flag. Skipped where a GPU is visible: no GPU has run this mode yet."""

from __future__ import annotations

import os

import pytest
import torch

if torch.cuda.is_available():
    pytest.skip("a GPU is visible: the kernels are not interpreted", allow_module_level=True)
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("TRITON_INTERPRET=1 was not set before triton was imported", allow_module_level=True)
pytest.importorskip("triton", reason="triton is not installed (pip install triton; CI installs it)")

from interpreted_cuda import InterpretedCudaBackend

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import PROMPTS, backend_registry, write_tiny_llama

NEW_TOKENS = 4
GREEDY = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)
SEEDED = SamplingParams(
    max_new_tokens=NEW_TOKENS,
    ignore_eos=True,
    do_sample=True,
    seed=1234,
    temperature=0.8,
    top_k=20,
    top_p=0.9,
)
# each prompt token is a row of the decode kernel per layer in this mode (seconds a step interpreted): a
# 12-token target, prefilled whole alone (one step of 16 tokens) and cut by the step budget beside 7, 11
# and 3 others
TARGET = list(PROMPTS[0][:12])
OTHERS = [list(PROMPTS[1]), list(PROMPTS[2][:11]), [9, 8, 7]]  # 7, 11 and 3 tokens


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("deterministic") / "llama")


def _engine(path, dtype: str, **limits) -> LLMEngine:
    settings = dict(
        model_id=str(path), backend="cuda-interpreted", dtype=dtype, deterministic=True, block_size=4,
        max_total_tokens=64, max_batch_total_tokens=512, max_batch_prefill_tokens=16, max_num_seqs=5,
        prefix_caching=False,
    )  # fmt: skip
    config = EngineConfig(**{**settings, **limits})
    return LLMEngine.from_config(
        config, registry=backend_registry("cuda-interpreted", InterpretedCudaBackend)
    )


def _targets_beside(engine: LLMEngine, crowd: list[list[int]]) -> list[list[int]]:
    results = engine.generate([*crowd, TARGET, TARGET], [GREEDY] * len(crowd) + [GREEDY, SEEDED])
    return [r.token_ids for r in results[-2:]]


@pytest.mark.parametrize("dtype", ["bfloat16"])
def test_tokens_do_not_depend_on_what_runs_beside(tiny_llama, dtype):
    engine = _engine(tiny_llama, dtype)
    assert engine.runner.capabilities().batch_invariant
    alone = [engine.generate([TARGET], p)[0].token_ids for p in (GREEDY, SEEDED)]
    assert _targets_beside(engine, OTHERS) == alone, "beside 3 other requests"
    # continued from the prefix cache: the conformance suite's deterministic test, on this backend in float32
    # (tests/conformance/test_triton_interpret.py), which runs the same steps through the same kernels

    small = _engine(tiny_llama, dtype, max_total_tokens=48, max_batch_total_tokens=48)
    assert _targets_beside(small, OTHERS) == alone, "with preemptions"
    assert small.scheduler.num_preemptions > 0, "nothing was preempted"
