"""`tgi benchmark serving`: closed-loop concurrency sweeps or Poisson arrival rates against one or more
servers on this machine, given (`--server NAME=URL`) or started for the run (`--start ours|llama.cpp|
transformers`), reported as a table, JSON and a PNG plot (the sweep itself is `serving.py`'s). With
`--model-shape 1b|8b` the started peers serve a random-weight Llama of real size, made for the run (or taken
from the cache) by llama.cpp's own tools where they are found (`bench_model.py`); with `--model-shape
smolvlm-256m` (a SmolVLM-256M-shaped Idefics3, for `--images`) only `--start ours` is taken.

Per level: output tokens/s = completion tokens of all requests ÷ the level's wall time (first request sent to
last response ended); total tokens/s adds the prompt tokens the servers report; TTFT at the first streamed
token; ITL between streamed tokens (pooled over requests); E2E per request.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys

from tgi.benchmarks.bench_model import FORMATS, add_model_arguments, default_format, is_vlm, prepare
from tgi.benchmarks.client import APIS
from tgi.benchmarks.llama_cpp_tools import find_tools
from tgi.benchmarks.prompts import PROMPT_SETS
from tgi.benchmarks.report import format_markdown, format_table
from tgi.benchmarks.serving import Options, Target, parse_levels, parse_server, run_benchmark

STARTABLE = ("ours", "llama.cpp", "transformers")


def add_arguments(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a(
        "--server",
        action="append",
        default=[],
        metavar="NAME=URL[,api=tgi]",
        help="a running server on this machine (repeatable), e.g. ours=http://127.0.0.1:3000",
    )
    a(
        "--start",
        action="append",
        default=[],
        choices=STARTABLE,
        help="start a peer for the run (repeatable; in this order): ours (`tgi launch`), llama.cpp "
        "(`llama-server`, when found), transformers (offline static batching)",
    )
    a("--api", choices=APIS, default="openai", help="API of --server entries without api= (default openai)")
    a("--model", default=None, help="`model` field for OpenAI requests (default: none sent)")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--concurrency", default=None, help="closed-loop clients per level, e.g. 1,8,32")
    load.add_argument(
        "--request-rate", default=None, help="Poisson arrivals per second per level, e.g. 2,4,inf"
    )
    a("--max-concurrency", type=int, default=None, help="with --request-rate: cap on requests in flight")
    a(
        "--num-requests",
        type=int,
        default=None,
        help="requests per level (default: 2×C, at least 8; rates: 64)",
    )
    a(
        "--requests-per-client",
        type=int,
        default=2,
        help="closed loop: requests per client per level (a level runs 8 at least)",
    )
    a("--prompts", choices=sorted(PROMPT_SETS), default="peers", help="prompt set (default peers)")
    a("--seed", type=int, default=0, help="prompt-set seed (default 0)")
    a(
        "--max-tokens",
        type=int,
        default=None,
        help="output tokens per request (default: the set's; peers 128)",
    )
    a("--no-ignore-eos", dest="ignore_eos", action="store_false", help="let requests stop at EOS")
    a(
        "--images",
        type=int,
        choices=(0, 1),
        default=0,
        help="synthetic PNG images per request (0 or 1; OpenAI: a chat message's image_url part, TGI: a "
        "markdown image); our server's /metrics give the vision encoder's share of the step time",
    )
    a("--image-size", type=int, default=448, help="with --images: the square image's side in pixels")
    a("--request-timeout", type=float, default=600.0, help="seconds before a request is abandoned")
    a("--warmup-requests", type=int, default=2, help="short requests per server before measuring")
    a("--json", dest="json_path", default=None, help="write the report as JSON here")
    a("--plot", dest="plot_path", default=None, help="write a throughput-vs-latency PNG here (matplotlib)")
    a("--markdown", action="store_true", help="also print the summary tables as Markdown")
    a("--no-progress", dest="progress", action="store_false", help="no progress bar")
    a(
        "--roofline",
        default=None,
        metavar="FILE",
        help="`tgi benchmark roofline --json FILE`'s measurements: adds each level's share of the read "
        "bandwidth and of the peak, for the weights of the GGUF the peers serve (--model-id, "
        "--model-shape or the default model's)",
    )
    peers = p.add_argument_group("started peers (--start)")
    peers.add_argument("--model-id", default=None, help="GGUF for the peers (default: the default model's)")
    peers.add_argument("--llama-server", default=None, help="llama-server binary (default: from PATH)")
    peers.add_argument("--llama-args", default="", help="extra llama-server arguments (one string)")
    peers.add_argument("--ours-args", default="", help="extra `tgi launch` arguments (one string)")
    peers.add_argument(
        "--threads", type=int, default=2, help="llama.cpp and transformers threads (default 2)"
    )
    peers.add_argument("--startup-timeout", type=float, default=600.0, help="seconds to wait for health")
    peers.add_argument("--log-dir", default=None, help="where started servers log (default: a temp dir)")
    made = p.add_argument_group(
        "a model made for the run (`tgi benchmark make-model`), for the started peers"
    )
    add_model_arguments(made, for_serving=True)
    made.add_argument(
        "--model-format",
        choices=FORMATS,
        default=None,
        help="with --model-shape: the file both servers load (safetensors: ours the bfloat16 folder, "
        "llama.cpp the bf16 GGUF; default Q4_K_M; smolvlm-256m: safetensors, float32)",
    )


def options_from_args(args: argparse.Namespace) -> Options:
    if args.request_rate:
        mode, levels = "rate", parse_levels(args.request_rate, allow_inf=True)
    else:
        mode, levels = "concurrency", parse_levels(args.concurrency or "1,8,32", allow_inf=False)
    return Options(
        prompt_set=args.prompts,
        seed=args.seed,
        max_tokens=args.max_tokens,
        ignore_eos=args.ignore_eos,
        mode=mode,
        levels=levels,
        num_requests=args.num_requests,
        requests_per_client=args.requests_per_client,
        max_concurrency=args.max_concurrency,
        request_timeout=args.request_timeout,
        warmup_requests=args.warmup_requests,
        progress=args.progress,
        images=args.images,
        image_size=args.image_size,
    )


def run(args: argparse.Namespace) -> int:
    """`tgi benchmark serving`: returns the exit status (2 for bad arguments, 1 if any request failed)."""
    import shlex

    from tgi.benchmarks import peers

    try:
        options = options_from_args(args)
        targets = [parse_server(s, args.api) for s in args.server]
        for t in targets:
            t.model = args.model
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not targets and not args.start:
        print("error: give at least one --server NAME=URL or --start PEER", file=sys.stderr)
        return 2
    if args.model_shape and (args.model_id or not args.start):
        why = "give one of --model-shape and --model-id" if args.model_id else "it is for --start peers"
        print(f"error: --model-shape: {why}", file=sys.stderr)
        return 2
    others = [which for which in args.start if which != "ours"]
    if is_vlm(args.model_shape) and others:
        why = "it would need an mmproj file" if others[0] == "llama.cpp" else "it loads GGUF files only"
        print(
            f"error: --model-shape {args.model_shape} is served by --start ours only, not {others[0]} ({why})",
            file=sys.stderr,
        )
        return 2
    started: list[peers.ManagedServer] = []
    try:
        made = _made_model(args)
        ours_model = made.ours if made else args.model_id
        for which in args.start:
            gguf = made.gguf if made else args.model_id or peers.default_gguf()
            if which == "ours":
                print("starting ours (tgi launch)...", file=sys.stderr, flush=True)
                s = peers.start_ours(
                    ours_model,
                    shlex.split(args.ours_args),
                    log_dir=args.log_dir,
                    timeout=args.startup_timeout,
                )
                started.append(s)
                targets.append(Target("ours", s.url, "openai", args.model))
            elif which == "llama.cpp":
                binary = peers.find_llama_server(args.llama_server)
                if binary is None:
                    print("llama-server not found (PATH or --llama-server): skipped", file=sys.stderr)
                    continue
                print(f"starting llama.cpp ({binary})...", file=sys.stderr, flush=True)
                s = peers.start_llama_server(
                    binary,
                    gguf,
                    threads=args.threads,
                    extra_args=shlex.split(args.llama_args),
                    log_dir=args.log_dir,
                    timeout=args.startup_timeout,
                )
                started.append(s)
                targets.append(Target("llama.cpp", s.url, "openai", args.model))
            else:
                print("loading transformers (offline static batching)...", file=sys.stderr, flush=True)
                peer = peers.TransformersPeer(gguf, threads=args.threads)
                peer.load()
                targets.append(Target("transformers", offline=peer))
        if not targets:
            print("error: no server to benchmark", file=sys.stderr)
            return 2
        report = asyncio.run(run_benchmark(targets, options))
        if made:
            report["model"] = made.describe()
        if args.roofline:
            add_roofline(report, args.roofline, made.gguf if made else args.model_id or peers.default_gguf())
    except (RuntimeError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        for s in started:
            s.stop()
    if made:
        print(f"model: {made.shape} {made.format}, made by {made.made_by}")
    print(format_table(report))
    if args.markdown or len(targets) > 1:
        print()
        print(format_markdown(report))
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(report, f, indent=2)
        print(f"\nJSON report: {args.json_path}", file=sys.stderr)
    if args.plot_path:
        from tgi.benchmarks.plot import plot_report

        plot_report(report, args.plot_path)
        print(f"plot: {args.plot_path}", file=sys.stderr)
    return 1 if any(r["num_errors"] for r in report["results"]) else 0


def add_roofline(report: dict, roofline_json: str, gguf: str) -> None:
    """Each row's shares of the measured roofline (`roofline.serving_fractions`), for `gguf`'s weights."""
    from tgi.benchmarks.roofline import Roofline, serving_fractions, weight_cost

    with open(roofline_json) as f:
        roofline = Roofline.from_json(json.load(f))
    cost = weight_cost(gguf)
    report["roofline"] = {**roofline.to_json(), "weights": gguf, **dataclasses.asdict(cost)}
    for row in report["results"]:
        row.update(serving_fractions(row, cost, roofline))


def _made_model(args: argparse.Namespace):
    """The `bench_model.BenchModel` that --model-shape asks for (made now unless cached), or None."""
    from tgi.benchmarks import peers

    if not args.model_shape:
        return None
    server = peers.find_llama_server(args.llama_server)
    tools = find_tools(args.llama_cpp_dir, server)
    note = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    fmt = args.model_format or default_format(args.model_shape)
    return prepare(fmt, tools, args.model_cache_dir, args.model_shape, log=note)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tgi benchmark serving", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
