"""Call 5 of the GPU plan (about 6 minutes on an H100; stopped at 9.5): one decode step of 128 requests,
eager and with CUDA graphs, each pass in a process of its own (`cuda_bench.py --sections step`): its latency
timed with CUDA events (p50 and min over 20 steps, after 3 warm-up steps), the kernels launched per step and
the GPU-busy fraction (the union of the kernels' intervals over the wall time, from `torch.profiler`), and
the profiler's table of the 25 kernels with the most device time.

Writes `$OUT/step_profile_eager.json` and `$OUT/step_profile_graphs.json` (with the table), their logs, and
`$OUT/step_profile.json` side by side; exits 1 when a pass fails. Reuses the 8B checkpoint of call 4 while
the machine is still held, else writes it (~2 minutes). The dry run: 4 requests, 2 steps, on the CPU.

    python src/tgi/benchmarks/gpu/step_profile.py [--dry-run]
"""

from __future__ import annotations

import sys

from plan_run import run_bench_passes

PASSES = {
    "step_profile_eager": ["--sections", "step"],
    "step_profile_graphs": ["--sections", "step", "--cuda-graphs"],
}
FIGURES = ("step_concurrency", "step_rows_per_step", "step_latency_ms_p50", "step_latency_ms_min",
           "step_tokens_per_s", "step_kernels_per_step", "step_gpu_busy_fraction", "cuda_graphs_captured")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return run_bench_passes(__doc__.splitlines()[0], "step_profile", PASSES, FIGURES, argv)


if __name__ == "__main__":
    sys.exit(main())
