"""The CPU backend's LoRA pair (`native.lora_sgmv`, `tgi.backends.cpu.lora.CpuLoRAOps`): every implementation
this CPU offers (scalar reference, AVX512-BF16, AVX2) against a float64 per-token loop, for a step mixing four
adapters, tokens without one, padding rows, an adapter that leaves the linear alone, zero-padded ranks and a
fused linear's block-structured B (q/k/v parts: the fast paths skip the columns a rank cannot reach); and
`CpuLoRAOps` against core's torch ops on the same step, in both dtypes."""

from __future__ import annotations

import pytest
import torch
from cpu_features import MISSING_CPU_FEATURE

from tgi.backends.cpu import native
from tgi.backends.cpu.cpuinfo import cpu_info
from tgi.backends.cpu.lora import CpuLoRAOps, _transposed
from tgi.core.lora.ops import LoRAWeights, TorchLoRAOps

pytestmark = pytest.mark.skipif(
    not native.compiler_found(), reason="no C++ compiler to build the native kernels"
)
CPU = torch.device("cpu")
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}
SLOTS = [3, -1, 0, 0, 2, -1, 1, 3, 0, 2, 2]


def _fused_weights(dtype, parts=(40, 24, 24), rank=5, k=72) -> LoRAWeights:
    """4 slots of a q/k/v-like linear: slot 1 adapts none of it, slot 2 only its first part at rank 3
    (zero-padded to the stacked rank)."""
    g = torch.Generator().manual_seed(7)
    n, r_all = sum(parts), rank * len(parts)
    a = torch.randn(4, r_all, k, generator=g) * 0.2
    b = torch.zeros(4, n, r_all)
    row = 0
    for j, p in enumerate(parts):
        b[:, row : row + p, j * rank : (j + 1) * rank] = torch.randn(4, p, rank, generator=g) * 0.2
        row += p
    a[1].zero_(), b[1].zero_()
    b[2, :, 3:].zero_(), a[2, 3:].zero_()
    return LoRAWeights(a.to(dtype), b.to(dtype), (True, False, True, True))


def _per_token(y, x, w, slots):
    out = y.double().clone()
    for t, s in enumerate(slots):
        if s >= 0:
            out[t] += w.b[s].double() @ (w.a[s].double() @ x[t].double())
    return out


# a mixed step; 20 tokens of one adapter and one of another (tiles of 8, 8 and 4 on the bfloat16 path); one token
STEPS = [SLOTS, [0] * 9 + [3] + [0] * 11, [2]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("impl", ["reference", "avx512-bf16", "avx2"])
@pytest.mark.parametrize("step", range(len(STEPS)))
def test_every_implementation_equals_a_per_token_loop(dtype, impl, step):
    if impl not in native.lora_impls():
        pytest.skip(f"{MISSING_CPU_FEATURE}: the {impl} path of lora_sgmv")
    if (impl, dtype) in (("avx512-bf16", torch.float32), ("avx2", torch.bfloat16)):
        with pytest.raises(RuntimeError, match="lora_sgmv: "):
            w = _fused_weights(dtype)
            bt, cols = _transposed(w)
            x = torch.zeros(len(SLOTS), 72, dtype=dtype)
            native.lora_sgmv(
                torch.zeros(len(SLOTS), 88, dtype=dtype),
                x,
                w.a,
                bt,
                cols,
                torch.tensor(SLOTS, dtype=torch.int32),
                impl,
            )
        return
    token_slots = STEPS[step]
    w = _fused_weights(dtype)
    bt, cols = _transposed(w)
    assert cols[2, 3:].eq(0).all() and cols[0, 5:10].tolist() == [[40, 64]] * 5  # padded ranks, k's part
    g = torch.Generator().manual_seed(1)
    x = torch.randn(len(token_slots) + 2, 72, generator=g).to(dtype)  # two padding rows
    y = torch.randn(x.shape[0], 88, generator=g).to(dtype)
    slots = torch.tensor(token_slots, dtype=torch.int32)
    got = native.lora_sgmv(y.clone(), x, w.a, bt, cols, slots, impl)
    want = _per_token(y, x, w, token_slots)
    scale = want.abs().max().item()
    assert (got.double() - want).abs().max().item() <= TOL[dtype] * scale
    untouched = [t for t, s in enumerate(token_slots) if s < 0 or s == 1] + [
        len(token_slots),
        len(token_slots) + 1,
    ]
    assert torch.equal(got[untouched], y[untouched])
    with pytest.raises(RuntimeError, match="slot 4 of token 0"):
        native.lora_sgmv(y.clone(), x, w.a, bt, cols, torch.tensor([4], dtype=torch.int32), impl)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_ops_equal_core_torch_ops(dtype):
    w = _fused_weights(dtype)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(len(SLOTS), 72, generator=g).to(dtype)
    y = torch.randn(len(SLOTS), 88, generator=g).to(dtype)
    ref, ops = TorchLoRAOps(), CpuLoRAOps()
    # native where the CPU has the kernel's instructions (bfloat16: AVX512-BF16), and it says which
    native_here = dtype == torch.float32 or cpu_info().has_avx512_bf16
    assert (dtype in ops.dtypes) == native_here
    assert ops.describe(dtype).startswith("native" if native_here else "torch ops (no native path")
    want = ref.apply(y.clone(), x, w, ref.plan(SLOTS, CPU)).double()
    for slots in (SLOTS, [2] * len(SLOTS)):  # mixed, one adapter for the whole step
        want = ref.apply(y.clone(), x, w, ref.plan(slots, CPU)).double()
        got = ops.apply(y.clone(), x, w, ops.plan(slots, CPU)).double()
        assert (got - want).abs().max().item() <= TOL[dtype] * want.abs().max().item()
    assert ops.plan([-1, -1], CPU) is None
    torch_only = CpuLoRAOps(max_tokens=0)  # TGI_CPU_LORA_NATIVE_TOKENS=0: core's torch ops
    assert torch_only.describe(dtype).startswith("torch ops")
    got = torch_only.apply(y.clone(), x, w, torch_only.plan(SLOTS, CPU))
    assert torch.equal(got, ref.apply(y.clone(), x, w, ref.plan(SLOTS, CPU)))
