"""Single products of the CPU's quantized-weight kernels, as the CPU backend makes them (each format's switch to
the widened dense product included), against the dense bfloat16 product: [M, 576] x [576, 1536], the default
model's gate/up shape, bfloat16 activations, random weights (the timing does not depend on the values).

    OMP_NUM_THREADS=2 python src/tgi/benchmarks/cpu_quant_bench.py [--rows 1,8,32,512] [--reps 30]

Columns: `F.linear` on the bfloat16 weight, oneDNN with the weight prepacked (what the backend runs for small
inputs), GPTQ int4 group 64, int8 (EETQ), float8 (the native kernel) and float8 through the torch integer ops
it replaced. Prints a markdown row per M: the median microseconds of `--reps` interleaved calls; see
docs/backends/cpu.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

N, K, GROUP = 1536, 576, 64


def kernels() -> dict:
    from tgi.backends.cpu import quant_linear as ql
    from tgi.backends.cpu.linear import PackedLinearKernel
    from tgi.core.quant.weights import FP8Weight, GPTQWeight, Int8Weight

    g = torch.Generator().manual_seed(0)
    fp8 = (torch.randn(N, K, generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
    scale = torch.rand(N, generator=g) * 0.01 + 0.001
    int8 = torch.randint(-127, 128, (N, K), generator=g, dtype=torch.int8)

    def words(*shape: int) -> torch.Tensor:
        return torch.randint(-(2**31), 2**31 - 1, shape, generator=g, dtype=torch.int64).to(torch.int32)

    scales = (torch.rand(K // GROUP, N, generator=g) * 0.01).half()
    gptq = GPTQWeight(4, words(K // 8, N), words(K // GROUP, N // 8), scales, None, GROUP, True, N, K)
    dense = (fp8.float() * scale[:, None]).bfloat16()
    return {
        "bf16 F.linear": lambda x, b: F.linear(x, dense),
        "bf16 prepacked": PackedLinearKernel(dense),
        "gptq-int4 (g64)": ql.cpu_quantized_linear(gptq, "bfloat16"),
        "int8 (eetq)": ql.cpu_quantized_linear(Int8Weight(int8, scale, N, K), "bfloat16"),
        "fp8 (native)": ql.cpu_quantized_linear(FP8Weight(fp8, scale, N, K), "bfloat16"),
        "fp8 (torch ops)": ql.FP8BitsKernel(FP8Weight(fp8, scale, N, K), torch.bfloat16),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,8,32,512", help="input row counts M")
    parser.add_argument("--reps", type=int, default=30, help="interleaved calls per kernel and M")
    args = parser.parse_args()
    cands = kernels()
    for name, kernel in cands.items():
        print(f"{name}: {getattr(kernel, 'name', 'dense')}")
    print("| M | " + " | ".join(cands) + " |")
    print("|---" * (len(cands) + 1) + "|")
    for m in (int(v) for v in args.rows.split(",")):
        x = torch.randn(m, K).bfloat16()
        times: dict[str, list[float]] = {name: [] for name in cands}
        for _ in range(args.reps):
            for name, kernel in cands.items():
                start = time.perf_counter()
                kernel(x, None)
                times[name].append(time.perf_counter() - start)
        cells = [f"{statistics.median(v) * 1e6:.0f} us" for v in times.values()]
        print(f"| {m} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
