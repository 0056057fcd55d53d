"""Call 4 of the GPU plan (about 8 minutes on an H100; stopped at 9.5): `src/tgi/benchmarks/cuda_bench.py` on the
random Llama-3.1-8B checkpoint (written first, ~16 GB), twice, each pass in a process of its own:

1. eager: batch-1 decode against the HBM roofline, 128 requests' throughput, and `transformers` on the same
   card (`$OUT/model_bench_eager.json`);
2. with CUDA graphs (`--cuda-graphs`): batch-1 decode and throughput, the latter with steps overlapped
   (`--async-scheduling`, the default) and again with every step waited for, on the same engine
   (`$OUT/model_bench_graphs.json`).

Each pass's output goes to `$OUT/<pass>.log`; `$OUT/model_bench.json` sums up the figures side by side. Exits
1 when a pass fails. The dry run makes the same passes on the CPU with a 2-layer model (no graph is captured
there: the graphs pass says so and runs eagerly).

    python src/tgi/benchmarks/gpu/model_bench.py [--dry-run]
"""

from __future__ import annotations

import sys

from plan_run import run_bench_passes

PASSES = {
    "model_bench_eager": ["--sections", "batch1,throughput,transformers"],
    "model_bench_graphs": ["--sections", "batch1,throughput", "--cuda-graphs", "--compare-waited"],
}
FIGURES = ("tgi_batch1_decode_tokens_per_s", "tgi_batch1_fraction_of_ceiling", "bandwidth_ceiling_tokens_per_s",
           "weight_bytes_read_per_step", "tgi_throughput_output_tokens_per_s",
           "transformers_throughput_output_tokens_per_s", "throughput_vs_transformers", "cuda_graphs_captured",
           "tgi_throughput_waited_output_tokens_per_s", "async_scheduling_speedup")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return run_bench_passes(__doc__.splitlines()[0], "model_bench", PASSES, FIGURES, argv)


if __name__ == "__main__":
    sys.exit(main())
