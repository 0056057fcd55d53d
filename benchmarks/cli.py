"""`tgi benchmark serving ...` (load generator, `tgi.benchmarks.serving`), `tgi benchmark engine ...`
(engine micro-benchmark, `tgi.benchmarks.engine_bench`) and `tgi benchmark multiturn ...` (multi-turn chat
with prefix caching on and off, `tgi.benchmarks.multiturn`) and `tgi benchmark guided` (guided decoding's cost,
`tgi.benchmarks.guided_bench`). Importing this module imports neither torch nor httpx."""

from __future__ import annotations

import argparse


def add_benchmark_command(subparsers) -> None:
    """Register `benchmark` and its two subcommands on the `tgi` command's subparsers."""
    from tgi.benchmarks import engine_bench, guided_bench, multiturn, serving

    p = subparsers.add_parser(
        "benchmark", help="serving load generator, engine micro-benchmark, multi-turn chat"
    )
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

    p_multiturn = sub.add_parser(
        "multiturn",
        help="multi-turn chat sharing a system prompt, our server with prefix caching on and off",
        description=multiturn.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    multiturn.add_arguments(p_multiturn)
    p_multiturn.set_defaults(func=multiturn.run)

    p_guided = sub.add_parser(
        "guided",
        help="guided decoding's cost: grammar compile times, decode steps with and without a JSON schema",
        description=guided_bench.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    guided_bench.add_arguments(p_guided)
    p_guided.set_defaults(func=guided_bench.run)
