"""The serving benchmark: closed-loop concurrency sweeps or Poisson arrival rates against one or more
servers, level by level and server by server (interleaved, so ratios are taken side by side), reported as a
table, JSON and a PNG plot. The report itself (its JSON shape, the tables) is `report.py`'s; the command
line `serving_cli.py`'s; how a level's requests are sent (closed loop, Poisson) `load_patterns.py`'s.

Per level: output tokens/s = completion tokens of all requests ÷ the level's wall time (first request sent to
last response ended); total tokens/s adds the prompt tokens the servers report; TTFT at the first streamed
token; ITL between streamed tokens (pooled over requests); E2E per request.
"""

from __future__ import annotations

import asyncio
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from tgi.benchmarks.client import APIS, RequestResult, check_loopback, send
from tgi.benchmarks.load_patterns import run_closed_loop, run_poisson
from tgi.benchmarks.progress import Progress
from tgi.benchmarks.prompts import BenchPrompt, build_prompts
from tgi.benchmarks.report import (
    build_report,
    level_label,
    one_line,
    summarize_level,
)
from tgi.benchmarks.step_share import encoder_share, step_times
from tgi.benchmarks.synthetic_images import png_data_url


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
    # the image workload: 0 or 1 synthetic PNG of image_size x image_size per request, one per prompt
    images: int = 0
    image_size: int = 448


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


async def run_benchmark(targets: Sequence[Target], options: Options) -> dict:
    """Every level, and within it every target in turn; returns the report (`report.build_report`)."""
    import httpx

    if options.mode not in ("concurrency", "rate"):
        raise ValueError(f"unknown mode {options.mode!r}")
    if options.images not in (0, 1):
        raise ValueError(f"--images {options.images}: only 0 or 1 image per request is supported")
    if options.images and options.image_size < 1:
        raise ValueError(f"--image-size must be >= 1, got {options.image_size}")
    if options.images and any(t.offline is not None for t in targets):
        raise ValueError("--images: the offline transformers peer takes no images")
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
    progress = Progress(total, options.progress)
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
                        before = await step_times(client, t.url)
                        if options.mode == "concurrency":
                            results, duration = await run_closed_loop(requester, prompts, int(level))
                        else:
                            results, duration = await run_poisson(
                                requester, prompts, level, options.seed, options.max_concurrency
                            )
                        after = await step_times(client, t.url)
                    row = summarize_level(t.name, options.mode, level, results, duration)
                    row["encoder_share"] = None if t.offline is not None else encoder_share(before, after)
                    rows.append(row)
                    progress.note(one_line(row))
    finally:
        progress.close()
    return build_report(options, [t.describe() for t in targets], rows)


def _requester(client, target: Target, options: Options, on_done=None):
    async def request(prompt: BenchPrompt) -> RequestResult:
        image = png_data_url(options.image_size, prompt.text) if options.images else None
        result = await send(
            client,
            target.url,
            target.api,
            prompt,
            model=target.model,
            ignore_eos=options.ignore_eos,
            timeout=options.request_timeout,
            image_url=image,
        )
        if on_done is not None:
            on_done(result)
        return result

    return request


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


def main(argv: list[str] | None = None) -> int:
    """`python src/tgi/benchmarks/serving.py ...`: the same as `tgi benchmark serving ...` (`serving_cli`)."""
    from tgi.benchmarks.serving_cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
