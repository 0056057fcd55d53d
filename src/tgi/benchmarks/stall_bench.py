"""How long a stream pauses while another client sends a huge body: `tgi benchmark stall`.

A greedy completion streams `--max-tokens` tokens from a server on this machine (`--url`, loopback only); after
its 5th token, another client posts a body of `--body-mb` megabytes to each route in turn (`/tokenize`,
`/chat_tokenize`, `/generate`: past `--max-input-tokens`, each is refused with a 422, but only after the server
has read and measured it). For each route the report gives the gaps between the stream's tokens while that
body was being handled (from the 5th token until the first token after the body's answer) beside the gaps of
the same stream with nothing beside it: the largest and the median, in milliseconds. A stall of the engine
thread (the GIL held by a request's validation, a tokenizer run on the event loop) shows as a largest gap far
above the quiet one. This is a measurement, not a pass/fail check: the e2e suite checks only that the body is
refused and the stream completes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable

from tgi.benchmarks.client import check_loopback
from tgi.benchmarks.report import machine_info

SCHEMA = "tgi-bench-stall/1"
ROUTES = {
    "/tokenize": lambda text: {"inputs": text},
    "/chat_tokenize": lambda text: {"messages": [{"role": "user", "content": text}]},
    "/generate": lambda text: {"inputs": text, "parameters": {"max_new_tokens": 1}},
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default="http://127.0.0.1:3000", help="a tgi server on this machine")
    p.add_argument("--body-mb", type=float, default=1.0, help="size of the huge body (default 1 MB)")
    p.add_argument("--max-tokens", type=int, default=400, help="tokens the measured stream asks for")
    p.add_argument("--routes", default=",".join(ROUTES), help="comma-separated, of " + ", ".join(ROUTES))
    p.add_argument("--json", dest="json_path", default=None, help="write the results here")


def stream_gaps(
    url: str, max_tokens: int, during: Callable[[], object] | None, tail: int | None = None
) -> tuple[list[float], object]:
    """Stream a greedy completion from `url`; after its 5th token run `during()` in a thread (if given).
    Returns the gaps in seconds between tokens that arrived while it ran (all the gaps from the 5th token on
    when `during` is None) and what `during` returned. Raises `RuntimeError` if the stream ends first.
    `tail`: leave the stream (closing its connection) once that many tokens came after `during` returned,
    instead of reading it to its end."""
    import httpx

    body = {
        "prompt": "Once upon a time",
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
    }
    result: dict = {}
    arrivals: list[float] = []
    window: list[float] = []
    worker = threading.Thread(target=lambda: result.setdefault("r", during())) if during else None
    with (
        httpx.Client(timeout=300) as client,
        client.stream("POST", url + "/v1/completions", json=body) as response,
    ):
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            arrivals.append(time.monotonic())
            if len(arrivals) == 5:
                window.append(arrivals[-1])
                if worker is not None:
                    worker.start()
            elif len(window) == 1 and (worker is None or not worker.is_alive()) and len(arrivals) > 5:
                window.append(arrivals[-1])  # the first token after the body's answer
                after = len(arrivals)
            if tail is not None and len(window) == 2 and len(arrivals) - after >= tail:
                break
    if worker is not None:
        worker.join(300)
    if worker is None and len(window) == 1:
        window.append(arrivals[-1])
    if len(window) != 2:
        raise RuntimeError("the stream ended before the request beside it: ask for more --max-tokens")
    gaps = [b - a for a, b in itertools.pairwise(arrivals) if window[0] <= b and a <= window[1]]
    return gaps, result.get("r")


def summarize(gaps: list[float]) -> dict:
    """Largest and median gap in milliseconds, and how many gaps were measured."""
    return {
        "max_ms": round(max(gaps) * 1e3, 1),
        "p50_ms": round(statistics.median(gaps) * 1e3, 1),
        "n": len(gaps),
    }


def markdown(report: dict) -> str:
    lines = [
        f"Stall beside a {report['body_mb']:g} MB body ({report['machine'].get('cpu', '?')})",
        "",
        "| beside | status | largest gap (ms) | median gap (ms) | gaps |",
        "|---|---|---|---|---|",
    ]
    for name, row in report["rows"].items():
        lines.append(
            f"| {name} | {row.get('status', '-')} | {row['max_ms']} | {row['p50_ms']} | {row['n']} |"
        )
    return "\n".join(lines)


def run(options: argparse.Namespace) -> int:
    import httpx

    url = check_loopback(options.url)
    text = "hello " * int(options.body_mb * 1e6 / 6)
    rows: dict[str, dict] = {}
    gaps, _ = stream_gaps(url, options.max_tokens, None)
    rows["nothing"] = summarize(gaps)
    for route in [r for r in options.routes.split(",") if r]:
        if route not in ROUTES:
            print(f"unknown route {route!r}: one of {', '.join(ROUTES)}", file=sys.stderr)
            return 2
        payload = ROUTES[route](text)
        gaps, answer = stream_gaps(
            url, options.max_tokens, lambda p=payload, r=route: httpx.post(url + r, json=p, timeout=300)
        )
        rows[route] = {**summarize(gaps), "status": answer.status_code}
    report = {"schema": SCHEMA, "machine": machine_info(), "body_mb": options.body_mb, "rows": rows}
    print(markdown(report))
    if options.json_path:
        with open(options.json_path, "w") as f:
            json.dump(report, f, indent=2)
    return 0
