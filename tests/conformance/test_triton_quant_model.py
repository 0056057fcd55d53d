"""Quantized checkpoints served by `CudaBackend` on CPU tensors, its Triton kernels (the quantized GEMMs
included) run by triton's interpreter: a tiny Llama whose linears are quantized and packed by the plain-torch
references (tests/helpers/quant_checkpoints.py) as GPTQ (4-bit act-order asymmetric v1, 8-bit per-channel v2), AWQ
and compressed-tensors FP8 (per-channel) checkpoints store them gives the greedy tokens of the dense checkpoint of its dequantized weights, served the same way,
and the logprobs of every prompt and generated token (and the top 5 alternatives) within 1e-4 (float32); so
does a dense checkpoint quantized at load (--quantize eetq, fp8) against its dequantized weights. Formats
the backend has no kernel for are refused at start-up by name. Where a GPU is visible the same tests serve
on it, the kernels compiled (`triton_device`)."""

from __future__ import annotations

import pytest
import torch
from triton_device import kernel_test_backend, one_split_test_backend, skip_unless_triton_runs

skip_unless_triton_runs()

from quant_checkpoints import write_quantized  # noqa: E402

from tgi.core.config import EngineConfig  # noqa: E402
from tgi.core.engine import LLMEngine  # noqa: E402
from tgi.core.interfaces.types import UnsupportedError  # noqa: E402
from tgi.core.sampling_params import SamplingParams  # noqa: E402
from tgi.core.testing.model import PROMPTS, backend_registry, write_tiny_llama  # noqa: E402

ATOL = 1e-4  # logprobs, float32: the quantized GEMM and F.linear on the same weights sum in other orders
NEW_TOKENS = 3  # the prefill's token and two decodes


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("quant") / "dense")


def _engine(path, quantize: str | None = None) -> LLMEngine:
    config = EngineConfig(
        model_id=str(path), backend="cuda-interpreted", max_total_tokens=64, max_batch_total_tokens=512,
        max_num_seqs=8, max_batch_prefill_tokens=16, quantize=quantize,  # warm-up: a 16-token prefill
    )  # fmt: skip
    return LLMEngine.from_config(
        config, registry=backend_registry("cuda-interpreted", one_split_test_backend())
    )


def _generate(engine: LLMEngine) -> list[tuple[list[int], list[float], list[list[float]], list[float]]]:
    """Per prompt: (greedy tokens, their logprobs, top-5 logprobs per step, prompt logprobs)."""
    params = SamplingParams(
        max_new_tokens=NEW_TOKENS, ignore_eos=True, logprobs=True, top_n_tokens=5, prompt_logprobs=True
    )
    # 7 and 8 tokens, prefilled in one step (each token a row of every interpreted kernel)
    rids = [engine.add_request(list(p), params) for p in (PROMPTS[1], PROMPTS[2][:8])]
    out = {r: ([], [], [], []) for r in rids}
    while engine.has_unfinished():
        for e in engine.step():
            tokens, lps, tops, prompt = out[e.request_id]
            tokens.append(e.token_id)
            lps.append(e.logprob)
            tops.append([t.logprob for t in e.top_tokens])
            if e.prompt_tokens is not None:
                prompt.extend(t.logprob for t in e.prompt_tokens[1:])
    return [out[r] for r in rids]


@pytest.mark.parametrize(
    ("kind", "opts", "fmt"),
    [
        ("gptq", dict(bits=4, group_size=32, sym=False, desc_act=True, v1=True), "gptq-int4"),
        ("gptq", dict(bits=8, group_size=-1, sym=True, v1=False), "gptq-int8"),
        ("awq", dict(bits=4, group_size=32, sym=False), "awq-int4"),
        ("fp8", dict(per_channel=True), "fp8"),
    ],
)
def test_quantized_checkpoint_equals_its_dequantized_weights(dense, tmp_path, kind, opts, fmt):
    quantized, reference = write_quantized(dense, tmp_path, kind, **opts)
    engine = _engine(quantized)
    info = engine.model_info.quantization
    assert info is not None and info.weight_format == fmt and info.source == "checkpoint"
    assert info.num_linears > 0 and "triton" in info.kernel, info.kernel
    _assert_equal(_generate(engine), _generate(_engine(reference)))


def _assert_equal(got, want) -> None:
    for (tokens, lps, tops, prompt), (w_tokens, w_lps, w_tops, w_prompt) in zip(got, want, strict=True):
        assert tokens == w_tokens
        assert len(prompt) == len(w_prompt) > 0
        flat, w_flat = [x for t in tops for x in t], [x for t in w_tops for x in t]
        for a, b in ((lps, w_lps), (prompt, w_prompt), (flat, w_flat)):
            assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=ATOL, rtol=0)


@pytest.mark.parametrize(("quantize", "fmt"), [("eetq", "int8"), ("fp8", "fp8")])
def test_quantized_at_load_equals_its_dequantized_weights(dense, quantize, fmt):
    """--quantize eetq / fp8 on a dense checkpoint: the reference is the dense model with each linear's
    weight replaced by what core's load-time quantizer made (`QuantizedWeight.dequantize()`)."""
    engine = _engine(dense, quantize)
    info = engine.model_info.quantization
    assert info is not None and info.weight_format == fmt and info.source == "load-time"
    assert "triton" in info.kernel, info.kernel
    reference = _engine(dense)
    modules = dict(reference.runner.model.named_modules())
    replaced = quantized_bytes = dense_bytes = 0
    for name, module in engine.runner.model.named_modules():
        if getattr(module, "quant_weight", None) is not None:
            assert module.weight.is_meta  # no dense copy kept beside the quantized one
            assert module.linear_kernel.nbytes == module.quant_weight.nbytes
            quantized_bytes += module.linear_kernel.nbytes
            dense_bytes += modules[name].weight.numel() * modules[name].weight.element_size()
            with torch.no_grad():
                modules[name].weight.copy_(module.quant_weight.dequantize())
            replaced += 1
    assert replaced == info.num_linears > 0
    assert quantized_bytes < 0.27 * dense_bytes  # 1 byte per float32 weight, and a scale per row
    _assert_equal(_generate(engine), _generate(reference))


@pytest.mark.parametrize("quantize", ["bitsandbytes-nf4", "bitsandbytes"])
def test_formats_without_a_triton_kernel_are_refused_by_name(dense, quantize):
    supported = r"\(it computes: awq-int4, fp8, gptq-int4, gptq-int8, int8\)"
    with pytest.raises(
        UnsupportedError, match=rf"backend 'cuda' has no kernel for bnb-\w+ weights .*{supported}"
    ):
        _engine(dense, quantize)


def test_rocm_states_the_same_formats():
    from tgi.backends.rocm.backend import RocmBackend

    for dtype in ("bfloat16", "float16", "float32"):
        assert RocmBackend().weight_formats(dtype) == kernel_test_backend()().weight_formats(dtype)
        assert set(RocmBackend().weight_formats(dtype)) == {
            "gptq-int4",
            "gptq-int8",
            "awq-int4",
            "fp8",
            "int8",
        }
