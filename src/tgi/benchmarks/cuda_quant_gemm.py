"""Timing of the Triton quantized GEMMs (`tgi.backends.triton_common.kernels.quant_int` / `quant_w8`)
against the dense product, on Llama-3.1-8B's linear shapes; run by `cuda_bench.py --quant-gemm`.

For each (shape, format, rows): median microseconds per call (CUDA events, after warm-up), TFLOP/s, the
weight bytes read per second, the speed-up over the dense 16-bit `F.linear`, and the kernel's largest error
against x @ dequantized(W).T in float32, relative to the largest reference value (a GPU check of what the
interpreter tests check on the CPU). Weights are random codes in each format's packing (the values do not
change the timing); scales are set so that the dequantized weights are of order 0.02.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

#: Llama-3.1-8B's linears as (name, in_features, out_features); q/k/v and gate/up fused as TGI fuses them
LLAMA_31_8B_LINEARS = (
    ("qkv_proj", 4096, 6144),
    ("o_proj", 4096, 4096),
    ("gate_up_proj", 4096, 28672),
    ("down_proj", 14336, 4096),
)
FORMATS = ("gptq-int4", "gptq-int4-act-order", "gptq-int8", "awq-int4", "fp8", "int8")
GROUP_SIZE = 128


def _random_int32(shape: tuple[int, ...], gen: torch.Generator, device: str) -> torch.Tensor:
    """Random 32-bit words: every field of every word a random code."""
    return (
        torch.randint(-(2**31), 2**31 - 1, shape, generator=gen, dtype=torch.int64).to(torch.int32).to(device)
    )


def make_case(
    fmt: str, k: int, n: int, dtype: torch.dtype, device: str, seed: int = 0, split: int | None = None
):
    """(kernel: x -> y, dequantized W [n, k] float32, weight bytes) for one format and shape; `split`:
    programs along K (None: the kernels' heuristic)."""
    from tgi.backends.triton_common.kernels.quant_int import awq_gemm, gptq_gemm
    from tgi.backends.triton_common.kernels.quant_w8 import fp8_gemm, int8_gemm
    from tgi.core.quant.weights import AWQWeight, FP8Weight, GPTQWeight, Int8Weight

    gen = torch.Generator().manual_seed(seed)
    groups = k // GROUP_SIZE
    scales = (torch.rand(groups, n, generator=gen) * 0.01 + 0.001).to(dtype).to(device)
    if fmt == "fp8":
        w8 = (torch.randn(n, k, generator=gen) * 100).clamp(-448, 448).to(torch.float8_e4m3fn).to(device)
        scale = torch.full((n,), 0.02 / 100, device=device)
        w = FP8Weight(w8, scale, n, k)
        return (lambda x: fp8_gemm(x, w8, scale, split=split)), w.dequantize(), w.nbytes
    if fmt == "int8":
        w8 = torch.randint(-127, 128, (n, k), generator=gen, dtype=torch.int8).to(device)
        scale = torch.full((n,), 0.02 / 64, device=device)
        w = Int8Weight(w8, scale, n, k)
        return (lambda x: int8_gemm(x, w8, scale, split=split)), w.dequantize(), w.nbytes
    if fmt == "awq-int4":
        qweight, qzeros = (
            _random_int32((k, n // 8), gen, device),
            _random_int32((groups, n // 8), gen, device),
        )
        w = AWQWeight(qweight, qzeros, scales, GROUP_SIZE, n, k)
        return (
            (lambda x: awq_gemm(x, qweight, qzeros, scales, group_size=GROUP_SIZE, split=split)),
            w.dequantize(),
            w.nbytes,
        )
    bits = 8 if fmt == "gptq-int8" else 4
    per = 32 // bits
    qweight, qzeros = (
        _random_int32((k // per, n), gen, device),
        _random_int32((groups, n // per), gen, device),
    )
    g_idx = None
    if fmt.endswith("act-order"):
        g_idx = (torch.randperm(k, generator=gen) // GROUP_SIZE).to(torch.int32).to(device)
    w = GPTQWeight(bits, qweight, qzeros, scales, g_idx, GROUP_SIZE, True, n, k)

    def kernel(x):
        return gptq_gemm(
            x, qweight, qzeros, scales, g_idx, bits=bits, group_size=GROUP_SIZE, zero_offset=1, split=split
        )

    return kernel, w.dequantize(), w.nbytes


def median_us(fn: Callable[[], object], device: str, iters: int, warmup: int = 3) -> float:
    """Median wall time of fn() in microseconds (CUDA events on a GPU, perf_counter elsewhere)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if device.startswith("cuda"):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def run(
    rows: list[int],
    dtype: torch.dtype = torch.bfloat16,
    device: str = "cuda",
    shapes=LLAMA_31_8B_LINEARS,
    formats=FORMATS,
    iters: int = 50,
    split: int | None = None,
    log: Callable[[str], None] = print,
) -> list[dict]:
    """Time every (shape, format, rows); returns one dict per measurement and logs one line each."""
    from tgi.backends.triton_common.kernels.quant_int import split_k

    results = []
    gen = torch.Generator().manual_seed(1)
    for name, k, n in shapes:
        dense = (torch.randn(n, k, generator=gen) * 0.02).to(dtype).to(device)
        for fmt in formats:
            kernel, w_deq, weight_bytes = make_case(fmt, k, n, dtype, device, split=split)
            for m in rows:
                x = torch.randn(m, k, generator=gen).to(dtype).to(device)
                want = x.float() @ w_deq.T
                err = ((kernel(x).float() - want).abs().max() / want.abs().max()).item()
                us = median_us(lambda x=x, f=kernel: f(x), device, iters)
                dense_us = median_us(lambda x=x, w=dense: torch.nn.functional.linear(x, w), device, iters)
                r = dict(
                    linear=name, k=k, n=n, format=fmt, rows=m, dtype=str(dtype).removeprefix("torch."),
                    us=us, dense_us=dense_us, speedup_vs_dense=dense_us / us, tflops=2 * m * n * k / us / 1e6,
                    weight_gb_per_s=weight_bytes / us / 1e3, max_rel_error=err,
                    split_k=split_k(m, n, k, torch.device(device), split),
                )  # fmt: skip
                results.append(r)
                log(
                    f"{name:13s} {k:5d}->{n:5d} {fmt:20s} rows {m:5d} split {r['split_k']}: {us:9.1f} us "
                    f"(dense {dense_us:9.1f} us, x{r['speedup_vs_dense']:.2f}), {r['tflops']:.1f} TFLOP/s, "
                    f"{r['weight_gb_per_s']:.0f} GB/s of weights, rel. error {err:.1e}"
                )
    return results
