"""Call 4 of the GPU plan (about 8 minutes on an H100; stopped at 9.5): `benchmarks/cuda_bench.py` on the
random Llama-3.1-8B checkpoint (written first, ~16 GB), twice, each pass in a process of its own:

1. eager: batch-1 decode against the HBM roofline, 128 requests' throughput, and `transformers` on the same
   card (`$OUT/model_bench_eager.json`);
2. with CUDA graphs (`--cuda-graphs`): batch-1 decode and throughput (`$OUT/model_bench_graphs.json`).

Each pass's output goes to `$OUT/<pass>.log`; `$OUT/model_bench.json` sums up the figures side by side. Exits
1 when a pass fails. The dry run makes the same passes on the CPU with a 2-layer model (no graph is captured
there: the graphs pass says so and runs eagerly).

    python benchmarks/gpu/model_bench.py [--dry-run]
"""

from __future__ import annotations

import shutil
import sys
import time

from plan_run import bench_model_dir, parse_plan_args, run_cuda_bench, write_summary

PASSES = {
    "model_bench_eager": ["--sections", "batch1,throughput,transformers"],
    "model_bench_graphs": ["--sections", "batch1,throughput", "--cuda-graphs"],
}
FIGURES = ("tgi_batch1_decode_tokens_per_s", "tgi_batch1_fraction_of_ceiling", "bandwidth_ceiling_tokens_per_s",
           "weight_bytes_read_per_step", "tgi_throughput_output_tokens_per_s",
           "transformers_throughput_output_tokens_per_s", "throughput_vs_transformers", "cuda_graphs_captured")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_plan_args(__doc__.splitlines()[0], time_limit_s=570, argv=argv)
    deadline = time.perf_counter() + args.time_limit_s
    model_dir = bench_model_dir(args)
    summary, failed = {}, []
    try:
        for name, bench_args in PASSES.items():
            run, figures = run_cuda_bench(args, name, bench_args, model_dir, deadline)
            if run.returncode or figures is None:
                failed.append(name)
            summary[name] = {"returncode": run.returncode, "seconds": run.seconds, "timed_out": run.timed_out,
                             **{k: (figures or {}).get(k) for k in FIGURES}}  # fmt: skip
            if figures:
                summary.setdefault("device", figures.get("device"))
    finally:
        if args.dry_run:
            shutil.rmtree(model_dir, ignore_errors=True)
    write_summary(args, "model_bench", {**summary, "failed": failed})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
