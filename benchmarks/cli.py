"""`tgi benchmark serving ...` (load generator, `tgi.benchmarks.serving`) and `tgi benchmark engine ...`
(engine micro-benchmark, `tgi.benchmarks.engine_bench`). Importing this module imports neither torch nor httpx."""

from __future__ import annotations

import argparse


def add_benchmark_command(subparsers) -> None:
    """Register `benchmark` and its two subcommands on the `tgi` command's subparsers."""
    from tgi.benchmarks import engine_bench, serving

    p = subparsers.add_parser("benchmark", help="serving load generator and engine micro-benchmark")
    sub = p.add_subparsers(dest="benchmark", required=True)

    p_serving = sub.add_parser(
        "serving",
        help="closed-loop or Poisson load against OpenAI-compatible / TGI servers on this machine",
        description=serving.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serving.add_arguments(p_serving)
    p_serving.set_defaults(func=serving.run)

    p_engine = sub.add_parser(
        "engine",
        help="prefill and decode step latency and throughput straight on the engine (no HTTP)",
        description=engine_bench.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    engine_bench.add_arguments(p_engine)
    p_engine.set_defaults(func=engine_bench.run)
