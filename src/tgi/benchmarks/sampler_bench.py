"""Sampler micro-benchmark: `TorchSampler.sample` on random logits, batch 128 by default, for the batches a
serving step meets (greedy, seeded sampling with and without top-k / top-p), timed on whatever device
torch gives (`--device`, the CPU by default). Each case: the median of `--repeat` calls after two warm-up
calls, and the number of torch ops one call dispatches.

    python src/tgi/benchmarks/sampler_bench.py [--rows 128] [--vocab 128256] [--device cpu] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tgi.core.interfaces.batch import ScheduledSequence
from tgi.core.sampling.sampler import TorchSampler
from tgi.core.sampling_params import SamplingParams

CASES = {
    "greedy": dict(),
    "seeded": dict(do_sample=True, temperature=0.8),
    "seeded top-k 50": dict(do_sample=True, temperature=0.8, top_k=50),
    "seeded top-k 50 top-p 0.9": dict(do_sample=True, temperature=0.8, top_k=50, top_p=0.9),
    "seeded top-p 0.9": dict(do_sample=True, temperature=0.8, top_p=0.9),
}


class _OpCount(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def rows_for(params: dict, n: int) -> list[ScheduledSequence]:
    sp = SamplingParams(max_new_tokens=16, seed=1234, **params)
    return [ScheduledSequence(f"r{i}", [5], 9, [0], False, True, sp, 3 + i, 1, [1] * 10) for i in range(n)]


def bench_case(sampler, logits, rows, repeat: int, sync) -> tuple[float, int]:
    for _ in range(2):
        sampler.sample(logits, rows)
    sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = sampler.sample(logits, rows)
        out.token_ids.tolist()
        times.append(time.perf_counter() - t0)
    with _OpCount() as count:
        sampler.sample(logits, rows)
    return statistics.median(times), count.ops


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    logits = torch.randn(args.rows, args.vocab, generator=torch.Generator().manual_seed(0)).mul_(3).to(device)
    sampler = TorchSampler()
    print(f"{args.rows} rows x {args.vocab} vocab on {device} ({torch.get_num_threads()} threads)")
    for name in args.cases.split(","):
        if name not in CASES:
            raise SystemExit(f"unknown case {name!r}: choose from {', '.join(CASES)}")
        median, ops = bench_case(sampler, logits, rows_for(CASES[name], args.rows), args.repeat, sync)
        print(f"{name:28s} {median * 1e3:9.1f} ms  {ops:4d} torch ops")


if __name__ == "__main__":
    main()
