"""The serving benchmark: closed-loop concurrency sweeps or Poisson arrival rates against one or more
servers, level by level and server by server (interleaved, so ratios are taken side by side), reported as a
table, JSON and a PNG plot. The report itself (its JSON shape, the tables) is `report.py`'s.

Per level: output tokens/s = completion tokens of all requests ÷ the level's wall time (first request sent to
last response ended); total tokens/s adds the prompt tokens the servers report; TTFT at the first streamed
token; ITL between streamed tokens (pooled over requests); E2E per request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tgi.benchmarks.client import APIS, RequestResult, check_loopback, send
from tgi.benchmarks.prompts import PROMPT_SETS, BenchPrompt, build_prompts
from tgi.benchmarks.report import (
    build_report,
    format_markdown,
    format_table,
    level_label,
    one_line,
    summarize_level,
)

STARTABLE = ("ours", "llama.cpp", "transformers")


@dataclass
class Target:
    """A server to load (`url`), or the offline `transformers` peer (`offline`)."""

    name: str
    url: str | None = None
    api: str = "openai"
    model: str | None = None
    offline: object | None = None  # a `TransformersPeer`: closed loop only, static batches of C
    info: dict | None = None  # what the server's TGI `/info` said (dtype, backend, kernels), where it has one

    def describe(self) -> dict:
        kind = "offline" if self.offline is not None else self.api
        out = {"name": self.name, "url": self.url, "api": kind, "model": self.model}
        if self.info:
            keys = ("model_id", "model_dtype", "backend", "kernels", "version")
            out["info"] = {k: self.info[k] for k in keys if k in self.info}
        return out


async def _server_info(client, url: str) -> dict | None:
    """TGI's `/info` of a server (ours, TGI), so that the report says what code produced its figures;
    None for servers without it (llama.cpp)."""
    try:
        r = await client.get(url.rstrip("/") + "/info", timeout=5.0)
        return r.json() if r.status_code == 200 and isinstance(r.json(), dict) else None
    except Exception:
        return None


@dataclass
class Options:
    prompt_set: str = "peers"
    seed: int = 0
    max_tokens: int | None = None  # None: the prompt set's own (peers: 128)
    ignore_eos: bool = True
    mode: str = "concurrency"  # or "rate"
    levels: list[float] = field(default_factory=lambda: [1, 8, 32])
    num_requests: int | None = None  # per level; None: see `requests_for`
    requests_per_client: int = 2
    min_requests: int = 8
    max_concurrency: int | None = None  # rate mode: cap on requests in flight
    request_timeout: float = 600.0
    warmup_requests: int = 2
    progress: bool = True


def parse_levels(text: str, allow_inf: bool) -> list[float]:
    """`"1,8,32"` -> [1, 8, 32]; with `allow_inf`, "inf" is infinite (all requests at once)."""
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        value = math.inf if part in ("inf", "infinity") and allow_inf else float(part)
        if not value > 0 or math.isnan(value):
            raise ValueError(f"levels must be > 0, got {part}")
        if not allow_inf and (math.isinf(value) or value != int(value)):
            raise ValueError(f"concurrency must be a whole number, got {part}")
        out.append(value if math.isinf(value) or not value.is_integer() else int(value))
    if not out:
        raise ValueError("no level given")
    return out


def requests_for(options: Options, level: float) -> int:
    if options.num_requests:
        return options.num_requests
    if options.mode == "concurrency":
        return max(options.requests_per_client * int(level), options.min_requests)
    return 64


# -- running a level ---------------------------------------------------------------------------------------
async def run_closed_loop(
    requester: Callable[[BenchPrompt], object], prompts: Sequence[BenchPrompt], concurrency: int
) -> tuple[list[RequestResult], float]:
    """`concurrency` clients, each sending its next request when its last one ends, until `prompts` are
    used up. Returns the results (in prompt order) and the wall time."""
    results: list[RequestResult | None] = [None] * len(prompts)
    next_index = 0

    async def client() -> None:
        nonlocal next_index
        while next_index < len(prompts):
            i = next_index
            next_index += 1
            results[i] = await requester(prompts[i])

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(min(concurrency, len(prompts)))))
    return results, time.perf_counter() - t0  # type: ignore[return-value]


async def run_poisson(
    requester: Callable[[BenchPrompt], object],
    prompts: Sequence[BenchPrompt],
    rate: float,
    seed: int = 0,
    max_concurrency: int | None = None,
) -> tuple[list[RequestResult], float]:
    """Open loop: requests arrive as a Poisson process of `rate` per second (inf: all at once), optionally
    at most `max_concurrency` in flight. Returns the results (in prompt order) and the wall time."""
    rng = random.Random(seed)
    limit = asyncio.Semaphore(max_concurrency) if max_concurrency else None

    async def one(prompt: BenchPrompt) -> RequestResult:
        if limit is None:
            return await requester(prompt)
        async with limit:
            return await requester(prompt)

    t0 = time.perf_counter()
    tasks = []
    arrival = 0.0
    for prompt in prompts:
        if not math.isinf(rate):
            arrival += rng.expovariate(rate)
            delay = t0 + arrival - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(prompt)))
    results = await asyncio.gather(*tasks)
    return list(results), time.perf_counter() - t0


class _Progress:
    """tqdm on stderr when installed (and stderr is a terminal); otherwise a line per level."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="req", file=sys.stderr, dynamic_ncols=True, mininterval=1.0)
            except ImportError:
                pass

    def describe(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_description(text)

    def tick(self, _result=None) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def note(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


async def run_benchmark(targets: Sequence[Target], options: Options) -> dict:
    """Every level, and within it every target in turn; returns the report (`report.build_report`)."""
    import httpx

    if options.mode not in ("concurrency", "rate"):
        raise ValueError(f"unknown mode {options.mode!r}")
    for t in targets:
        if t.offline is None:
            t.url = check_loopback(t.url or "")
            if t.api not in APIS:
                raise ValueError(f"{t.name}: unknown API {t.api!r} (choose from {', '.join(APIS)})")
    counts = [requests_for(options, level) for level in options.levels]
    # distinct prompts for every level (no prompt-cache reuse across levels); the same for every server
    pool = build_prompts(options.prompt_set, sum(counts), options.seed, options.max_tokens)
    slices, start = [], 0
    for n in counts:
        slices.append(pool[start : start + n])
        start += n
    warm = build_prompts("peers", options.warmup_requests, options.seed + 7919, 16)

    runnable = [
        (t, level)
        for level in options.levels
        for t in targets
        if t.offline is None or options.mode == "concurrency"
    ]
    total = sum(requests_for(options, level) for _, level in runnable)
    progress = _Progress(total, options.progress)
    rows: list[dict] = []
    max_conn = int(max([c for c in options.levels if not math.isinf(c)] + [options.max_concurrency or 0]))
    limits = httpx.Limits(max_connections=max(max_conn, 256), max_keepalive_connections=max(max_conn, 64))
    timeout = httpx.Timeout(options.request_timeout, connect=30.0)
    try:
        async with httpx.AsyncClient(trust_env=False, limits=limits, timeout=timeout) as client:
            for t in targets:
                if t.offline is None:
                    t.info = await _server_info(client, t.url)
                if t.offline is not None and options.mode != "concurrency":
                    progress.note(f"{t.name}: offline static batching has no arrival rate; skipped")
                if warm and t.offline is None:
                    progress.describe(f"{t.name} warm-up")
                    await run_closed_loop(_requester(client, t, options), warm, 2)
                elif warm and t.offline is not None:
                    progress.describe(f"{t.name} warm-up")
                    await asyncio.to_thread(t.offline.run, warm[:1], 1)
            for level, prompts in zip(options.levels, slices, strict=True):
                for t in targets:
                    if t.offline is not None and options.mode != "concurrency":
                        continue
                    progress.describe(f"{t.name} {level_label(options.mode, level)}")
                    if t.offline is not None:
                        results, duration = await asyncio.to_thread(
                            t.offline.run, prompts, int(level), progress.tick
                        )
                    else:
                        requester = _requester(client, t, options, progress.tick)
                        if options.mode == "concurrency":
                            results, duration = await run_closed_loop(requester, prompts, int(level))
                        else:
                            results, duration = await run_poisson(
                                requester, prompts, level, options.seed, options.max_concurrency
                            )
                    row = summarize_level(t.name, options.mode, level, results, duration)
                    rows.append(row)
                    progress.note(one_line(row))
    finally:
        progress.close()
    return build_report(options, [t.describe() for t in targets], rows)


def _requester(client, target: Target, options: Options, on_done=None):
    async def request(prompt: BenchPrompt) -> RequestResult:
        result = await send(
            client,
            target.url,
            target.api,
            prompt,
            model=target.model,
            ignore_eos=options.ignore_eos,
            timeout=options.request_timeout,
        )
        if on_done is not None:
            on_done(result)
        return result

    return request


# -- command line ----------------------------------------------------------------------------------------
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
    a("--requests-per-client", type=int, default=2, help="closed loop: requests per client per level")
    a("--prompts", choices=sorted(PROMPT_SETS), default="peers", help="prompt set (default peers)")
    a("--seed", type=int, default=0, help="prompt-set seed (default 0)")
    a(
        "--max-tokens",
        type=int,
        default=None,
        help="output tokens per request (default: the set's; peers 128)",
    )
    a("--no-ignore-eos", dest="ignore_eos", action="store_false", help="let requests stop at EOS")
    a("--request-timeout", type=float, default=600.0, help="seconds before a request is abandoned")
    a("--warmup-requests", type=int, default=2, help="short requests per server before measuring")
    a("--json", dest="json_path", default=None, help="write the report as JSON here")
    a("--plot", dest="plot_path", default=None, help="write a throughput-vs-latency PNG here (matplotlib)")
    a("--markdown", action="store_true", help="also print the summary tables as Markdown")
    a("--no-progress", dest="progress", action="store_false", help="no progress bar")
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


def parse_server(spec: str, default_api: str) -> Target:
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise ValueError(f"--server {spec!r}: expected NAME=URL[,api=openai|tgi]")
    url, *extras = rest.split(",")
    api = default_api
    for extra in extras:
        key, _, value = extra.partition("=")
        if key != "api" or value not in APIS:
            raise ValueError(f"--server {spec!r}: unknown option {extra!r} (only api=openai|tgi)")
        api = value
    return Target(name, check_loopback(url), api)


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
    started: list[peers.ManagedServer] = []
    try:
        for which in args.start:
            gguf = args.model_id or peers.default_gguf()
            if which == "ours":
                print("starting ours (tgi launch)...", file=sys.stderr, flush=True)
                s = peers.start_ours(
                    args.model_id,
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
    except (RuntimeError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        for s in started:
            s.stop()
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tgi benchmark serving", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # `python benchmarks/<this file> ...`
    import sys

    sys.exit(main())
