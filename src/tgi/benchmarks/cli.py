"""`tgi benchmark serving ...` (load generator, `tgi.benchmarks.serving_cli`), `tgi benchmark engine ...`
(engine micro-benchmark, `tgi.benchmarks.engine_bench`), `tgi benchmark multiturn ...` (multi-turn chat
with prefix caching on and off, `tgi.benchmarks.multiturn`), `tgi benchmark guided` (guided decoding's cost,
`tgi.benchmarks.guided_bench`), `tgi benchmark stall` (a stream's pauses beside a huge body,
`tgi.benchmarks.stall_bench`), `tgi benchmark prediction` (Predicted Outputs' speed on a code edit,
`tgi.benchmarks.prediction_bench`), `tgi benchmark perplexity` (perplexity per weight format,
`tgi.benchmarks.perplexity_cli`), `tgi benchmark kv-cache` (a quantized KV cache's capacity, quality and speed,
`tgi.benchmarks.kv_cache_bench`), `tgi benchmark roofline` (the machine's own limits, `tgi.benchmarks.roofline`)
and `tgi benchmark make-model` (`tgi.benchmarks.bench_model`). Importing this module imports neither torch nor httpx."""

from __future__ import annotations

import argparse


def add_benchmark_command(subparsers) -> None:
    """Register `benchmark` and its subcommands on the `tgi` command's subparsers; each subcommand's module
    gives its flags (`add_arguments`), its runner (`run`) and its description (its docstring)."""
    from tgi.benchmarks import (
        bench_model,
        engine_bench,
        guided_bench,
        kv_cache_bench,
        multiturn,
        perplexity_cli,
        prediction_bench,
        roofline,
        serving_cli,
        stall_bench,
    )

    p = subparsers.add_parser(
        "benchmark", help="serving load generator, engine micro-benchmark, multi-turn chat, guided decoding"
    )
    sub = p.add_subparsers(dest="benchmark", required=True)
    for name, module, summary in (
        ("serving", serving_cli, "closed-loop or Poisson load against OpenAI-compatible / TGI servers on this machine"),
        ("engine", engine_bench, "prefill and decode step latency and throughput straight on the engine (no HTTP)"),
        ("multiturn", multiturn, "multi-turn chat sharing a system prompt, our server with prefix caching on and off"),
        ("guided", guided_bench, "guided decoding's cost: grammar compile times, decode steps with and without a JSON schema"),
        ("prediction", prediction_bench, "Predicted Outputs' speed: a code edit with and without `prediction`, side by side"),
        ("stall", stall_bench, "how long a stream pauses while another client sends a huge body to /tokenize, /chat_tokenize, /generate"),
        ("make-model", bench_model, "make (or reuse) the serving benchmark's random-weight 1B/8B-class Llama (llama.cpp's own tools where found) or SmolVLM-256M-shaped Idefics3"),
        ("kv-cache", kv_cache_bench, "a quantized KV cache (--kv-cache-dtype): tokens held, perplexity and top-1 agreement, decode speed, per KV dtype"),
        ("roofline", roofline, "this machine's read bandwidth and the peak of each product instruction, measured; serving figures as shares of them"),
        ("perplexity", perplexity_cli, "perplexity of a fixed text per weight format: ours against llama-perplexity, --quantize against float32"),
    ):  # fmt: skip
        command = sub.add_parser(
            name,
            help=summary,
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(command)
        command.set_defaults(func=module.run)
