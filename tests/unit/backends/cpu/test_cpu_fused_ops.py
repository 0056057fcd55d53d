"""The CPU's fused RMSNorm (+ residual), rotary and SiLU-mul against the torch ops of core's models that
they replace, in float32 and bfloat16, and their wiring onto a model."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tgi.backends.cpu import native
from tgi.core.models.layers import RMSNorm
from tgi.core.models.rotary import RotaryEmbedding, apply_rotary

# without a compiler the kernels cannot be built; with one, a build that fails fails every test
pytestmark = pytest.mark.skipif(
    not native.compiler_found(), reason="no C++ compiler to build the native kernels"
)

DTYPES = [torch.float32, torch.bfloat16]


def tol(dtype):  # float32: summation order only; bfloat16: at most one rounding step apart
    return dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2**-7, atol=2**-7)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 5, 64])
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm_matches_the_module(dtype, rows, with_residual):
    torch.manual_seed(rows)
    norm = RMSNorm(576, 1e-5, dtype)
    norm.weight.data = torch.randn(576).to(dtype)
    x = torch.randn(rows, 576).to(dtype)
    res = torch.randn(rows, 576).to(dtype) if with_residual else None
    expected, expected_res = norm(x, res)
    out, new_res = native.fused().rms_norm(x, res, norm.weight, 1e-5)
    torch.testing.assert_close(new_res, expected_res, rtol=0, atol=0)  # the add rounds the same way
    torch.testing.assert_close(out, expected, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 7])
def test_rotary_in_place_matches_apply_rotary(dtype, rows):
    torch.manual_seed(rows)
    h, hkv, dh = 9, 3, 64
    qkv = torch.randn(rows, (h + 2 * hkv) * dh).to(dtype)
    rotary = RotaryEmbedding(1.0 / (10000 ** (torch.arange(0, dh, 2).float() / dh)))
    cos, sin = rotary.cos_sin(torch.arange(100, 100 + rows), dtype)
    q, k, v = qkv.split([h * dh, hkv * dh, hkv * dh], dim=-1)
    eq = apply_rotary(q.reshape(rows, h, dh), cos, sin)
    ek = apply_rotary(k.reshape(rows, hkv, dh), cos, sin)
    ev = v.clone()
    native.fused().rotary_inplace(qkv, cos.contiguous(), sin.contiguous(), h + hkv, dh)
    q, k, v = qkv.split([h * dh, hkv * dh, hkv * dh], dim=-1)
    torch.testing.assert_close(q.reshape(rows, h, dh), eq, rtol=0, atol=0)  # same ops, same roundings
    torch.testing.assert_close(k.reshape(rows, hkv, dh), ek, rtol=0, atol=0)
    assert torch.equal(v, ev)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 6])
def test_silu_mul_matches_torch(dtype, rows):
    torch.manual_seed(rows)
    gate_up = (torch.randn(rows, 2 * 1536) * 4).to(dtype)
    gate, up = gate_up.split(1536, dim=-1)
    expected = F.silu(gate) * up
    torch.testing.assert_close(native.fused().silu_mul(gate_up), expected, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_ops_on_widths_that_are_not_a_multiple_of_the_vector(dtype):
    """The vector kernels cover a row 16 lanes at a time; the last, partial group must be neither lost
    nor written past (a guard column after each row stays as it was)."""
    torch.manual_seed(0)
    rows, d = 5, 100
    norm = RMSNorm(d, 1e-5, dtype)
    norm.weight.data = torch.randn(d).to(dtype)
    x, res = torch.randn(rows, d).to(dtype), torch.randn(rows, d).to(dtype)
    expected, expected_res = norm(x, res)
    out, new_res = native.fused().rms_norm(x, res, norm.weight, 1e-5)
    torch.testing.assert_close(new_res, expected_res, rtol=0, atol=0)
    torch.testing.assert_close(out, expected, **tol(dtype))

    heads, dh = 3, 20  # half = 10 lanes
    qkv = torch.randn(rows, heads * dh + 1).to(dtype)  # + a guard column
    rotary = RotaryEmbedding(1.0 / (10000 ** (torch.arange(0, dh, 2).float() / dh)))
    cos, sin = rotary.cos_sin(torch.arange(7, 7 + rows), dtype)
    expected_q = apply_rotary(qkv[:, : heads * dh].reshape(rows, heads, dh), cos, sin)
    guard = qkv[:, -1].clone()
    native.fused().rotary_inplace(qkv, cos.contiguous(), sin.contiguous(), heads, dh)
    torch.testing.assert_close(qkv[:, : heads * dh].reshape(rows, heads, dh), expected_q, rtol=0, atol=0)
    assert torch.equal(qkv[:, -1], guard)

    inter = 37
    gate_up = (torch.randn(rows, 2 * inter) * 4).to(dtype)
    gate, up = gate_up.split(inter, dim=-1)
    torch.testing.assert_close(native.fused().silu_mul(gate_up), F.silu(gate) * up, **tol(dtype))


def test_fused_ops_refuse_other_dtypes():
    with pytest.raises(RuntimeError, match="float32 or bfloat16"):
        native.fused().silu_mul(torch.randn(2, 8, dtype=torch.float64))


@pytest.mark.parametrize("dtype", DTYPES)
def test_native_kv_write_equals_the_torch_write(dtype):
    """Keys/values as the model passes them (views of the fused qkv rows), padding slots skipped."""
    from tgi.backends.cpu.kv_cache import CpuKVCache
    from tgi.core.interfaces.types import KVCacheSpec

    spec = KVCacheSpec(1, 3, 8, 4, str(dtype).removeprefix("torch."))
    torch_cache, native_cache = CpuKVCache(spec, 4), CpuKVCache(spec, 4)
    native_cache.native_write = native.fused().kv_write
    qkv = torch.randn(5, (6 + 3 + 3) * 8).to(dtype)
    _, k, v = qkv.split([48, 24, 24], dim=-1)
    k, v = k.view(5, 3, 8), v.view(5, 3, 8)
    slots = torch.tensor([7, -1, 0, 15, 9])
    for cache in (torch_cache, native_cache):
        cache.write(0, k, v, slots)
    assert all(torch.equal(a, b) for a, b in zip(torch_cache.layer(0), native_cache.layer(0), strict=True))
    with pytest.raises(RuntimeError, match="outside the cache"):
        native_cache.write(0, k, v, torch.tensor([16, 0, 0, 0, 0]))


# ---- greedy_pick: argmax + log-softmax of the chosen token, as TorchSampler computes them
def _greedy_reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xf = x.float()
    ids = xf.argmax(1)
    return ids, (xf.gather(1, ids[:, None]) - torch.logsumexp(xf, 1, keepdim=True)).squeeze(1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("vocab", [1, 7, 16, 49152, 50001])
def test_greedy_pick_matches_torch(dtype, vocab):
    gen = torch.Generator().manual_seed(vocab)
    x = (torch.randn(9, vocab, generator=gen) * 4).to(dtype)
    if vocab > 20:
        x[1, 5] = x[1, 17] = x[1].max() + 1  # a tie: the first index wins
        x[2, :] = -float("inf")
        x[2, 3] = 0.0  # one finite logit: probability 1
        x[4, 11] = float("inf")
        x[5, 8] = float("nan")
        x[6, : vocab // 2] = -float("inf")
    x[7, :] = -float("inf")  # nothing finite: logsumexp -inf, as torch
    ids, logprobs = native.fused().greedy_pick(x)
    ref_ids, ref_logprobs = _greedy_reference(x)
    assert torch.equal(ids, ref_ids)
    assert logprobs.dtype == torch.float32
    torch.testing.assert_close(logprobs, ref_logprobs, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_sampler_takes_the_greedy_kernel_only_for_plain_greedy_rows():
    from types import SimpleNamespace

    from tgi.core.sampling.sampler import TorchSampler
    from tgi.core.sampling_params import SamplingParams

    calls = []

    def kernel(logits):
        calls.append(logits.shape)
        return native.fused().greedy_pick(logits)

    def rows(**overrides):
        # every sampling field at its default (the sampler reads them all), but the overridden ones
        return [SimpleNamespace(sampling=SamplingParams(**overrides))] * 3

    logits = torch.randn(3, 1000).bfloat16()
    with_kernel, plain = TorchSampler(greedy_kernel=kernel), TorchSampler()
    a, b = with_kernel.sample(logits, rows()), plain.sample(logits, rows())
    assert calls == [(3, 1000)]
    assert torch.equal(a.token_ids, b.token_ids)
    torch.testing.assert_close(a.logprobs, b.logprobs, rtol=1e-5, atol=1e-5)
    # top tokens asked: the torch path, which reports them
    out = with_kernel.sample(logits, rows(top_n_tokens=2))
    assert len(calls) == 1 and out.top_token_ids.shape == (3, 2)
