"""The multi-turn chat benchmark (issue 17): conversations sharing a long system prompt, each turn resending
the whole history as chat clients do, against our server with prefix caching on and with it off, in one run.

Workload (seeded, generated here): a system prompt of `--system-words` words from the prompt vocabulary
(about one token each with the default model's tokenizer), `--conversations` conversations in flight (one
client each), `--turns` turns per conversation. A turn sends the history plus a new user message of
`--user-words` words (different for every conversation and turn) to `/v1/chat/completions`, streamed, with
`temperature=0`, `ignore_eos` and `max_tokens=--max-tokens`, and appends the reply's text to the history; the
next turn is sent as soon as the reply ends (no think time).

Per server: TTFT p50 / p90 over all requests and p50 per turn; total tokens/s = (prompt + completion tokens,
as the server's usage reports them) ÷ wall time (first request sent to last reply ended); output tokens/s;
the prompt tokens the server read from its prefix cache (`usage.prompt_tokens_details.cached_tokens`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shlex
import sys
import time
from dataclasses import dataclass

from tgi.benchmarks.client import check_loopback, stream_chat
from tgi.benchmarks.prompts import VOCABULARY
from tgi.benchmarks.report import machine_info
from tgi.benchmarks.stats import percentile, summarize

SCHEMA = "tgi.benchmarks.multiturn/1"


@dataclass(frozen=True)
class Workload:
    system: str  # the system prompt every conversation starts with
    user_turns: list[list[str]]  # [conversation][turn]: the user messages
    max_tokens: int

    @property
    def num_requests(self) -> int:
        return sum(len(turns) for turns in self.user_turns)


def build_workload(
    seed: int = 0,
    conversations: int = 8,
    turns: int = 4,
    system_words: int = 1000,
    user_words: int = 30,
    max_tokens: int = 64,
) -> Workload:
    rng = random.Random(seed)

    def words(n: int) -> str:
        return " ".join(rng.choice(VOCABULARY) for _ in range(n))

    system = "You are a helpful assistant. Background notes: " + words(system_words)
    users = [[f"Question {t + 1}: {words(user_words)}?" for t in range(turns)] for _ in range(conversations)]
    return Workload(system, users, max_tokens)


@dataclass
class TurnResult:
    conversation: int
    turn: int
    start: float  # time.perf_counter() seconds
    end: float = 0.0
    ttft: float | None = None
    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    error: str | None = None


async def chat_turn(client, url: str, messages: list[dict], max_tokens: int, result: TurnResult) -> None:
    """Stream one chat completion into `result` (the reply's text, TTFT, usage); errors go to `error`."""
    body = {
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }

    def usage(u: dict) -> None:
        result.prompt_tokens = u["prompt_tokens"]
        result.completion_tokens = u["completion_tokens"]
        result.cached_tokens = (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0

    await stream_chat(client, url, body, result, usage)


async def run_conversations(
    url: str, workload: Workload, timeout: float = 600.0
) -> tuple[list[TurnResult], float]:
    """Every conversation in flight at once, its turns one after another. Returns the turns' results
    (conversation by conversation, in turn order) and the wall time."""
    import httpx

    url = check_loopback(url)
    results: list[list[TurnResult]] = [[] for _ in workload.user_turns]

    async def conversation(c: int, client) -> None:
        history = [{"role": "system", "content": workload.system}]
        for t, question in enumerate(workload.user_turns[c]):
            history.append({"role": "user", "content": question})
            result = TurnResult(c, t, time.perf_counter())
            results[c].append(result)
            await chat_turn(client, url, history, workload.max_tokens, result)
            if result.error:
                return  # the conversation cannot go on without its reply
            history.append({"role": "assistant", "content": result.text})

    async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(conversation(c, client) for c in range(len(workload.user_turns))))
        wall = time.perf_counter() - t0
    return [r for conv in results for r in conv], wall


def summarize_run(name: str, results: list[TurnResult], wall: float) -> dict:
    ok = [r for r in results if r.error is None]
    prompt = sum(r.prompt_tokens for r in ok)
    output = sum(r.completion_tokens for r in ok)
    turns = sorted({r.turn for r in results})
    return {
        "name": name,
        "num_requests": len(results),
        "num_ok": len(ok),
        "first_error": next((r.error for r in results if r.error), None),
        "wall_s": wall,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "cached_tokens": sum(r.cached_tokens for r in ok),
        "total_tokens_per_s": (prompt + output) / wall if wall > 0 else None,
        "output_tokens_per_s": output / wall if wall > 0 else None,
        "ttft_ms": summarize([r.ttft for r in ok if r.ttft is not None], scale=1000),
        "ttft_p50_ms_by_turn": {
            str(t + 1): percentile([r.ttft * 1000 for r in ok if r.turn == t and r.ttft is not None], 50)
            for t in turns
        },
    }


def _f(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_markdown(report: dict) -> str:
    rows = report["results"]
    turns = list(rows[0]["ttft_p50_ms_by_turn"]) if rows else []
    head = ["server", "TTFT p50 (ms)", "TTFT p90 (ms)", *[f"turn {t} p50" for t in turns]]
    head += ["total tok/s", "output tok/s", "cached / prompt tokens", "ok"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["name"], _f(r["ttft_ms"]["p50"]), _f(r["ttft_ms"]["p90"])]
        cells += [_f(r["ttft_p50_ms_by_turn"].get(t)) for t in turns]
        cells += [_f(r["total_tokens_per_s"], 1), _f(r["output_tokens_per_s"], 1)]
        cells += [f"{r['cached_tokens']} / {r['prompt_tokens']}", f"{r['num_ok']}/{r['num_requests']}"]
        lines.append("| " + " | ".join(cells) + " |")
    if report.get("ratios"):
        q = report["ratios"]
        lines.append("")
        lines.append(
            f"cache on vs off: TTFT p50 {q['ttft_p50_off_over_on']:.1f}x lower, "
            f"total throughput {q['total_tokens_per_s_on_over_off']:.2f}x"
        )
    return "\n".join(lines)


def build_report(args: argparse.Namespace, workload: Workload, rows: list[dict], servers: list[dict]) -> dict:
    report = {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "workload": {
            "seed": args.seed,
            "conversations": len(workload.user_turns),
            "turns": len(workload.user_turns[0]),
            "system_words": args.system_words,
            "user_words": args.user_words,
            "max_tokens": workload.max_tokens,
        },
        "servers": servers,
        "results": rows,
    }
    by_name = {r["name"]: r for r in rows}
    on, off = by_name.get("cache-on"), by_name.get("cache-off")
    if on and off and on["ttft_ms"]["p50"] and off["total_tokens_per_s"]:
        report["ratios"] = {
            "ttft_p50_off_over_on": off["ttft_ms"]["p50"] / on["ttft_ms"]["p50"],
            "total_tokens_per_s_on_over_off": on["total_tokens_per_s"] / off["total_tokens_per_s"],
        }
    return report


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--server",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="a running server to load (loopback only); without it, ours is started twice: "
        "cache-on (--prefix-caching true) then cache-off (--prefix-caching false)",
    )
    p.add_argument(
        "--model-id", default=None, help="for the servers started here; default: the default model"
    )
    p.add_argument("--ours-args", default="", help="more `tgi launch` flags for the servers started here")
    p.add_argument("--conversations", type=int, default=8, help="conversations in flight (default 8)")
    p.add_argument("--turns", type=int, default=4, help="turns per conversation (default 4)")
    p.add_argument("--system-words", type=int, default=1000, help="system prompt length (default 1000)")
    p.add_argument("--user-words", type=int, default=30, help="words per user message (default 30)")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens per reply (default 64)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--startup-timeout", type=float, default=600.0)
    p.add_argument("--log-dir", default=None, help="where the started servers' logs go")
    p.add_argument("--json", dest="json_path", default=None, help="write the report as JSON here")


async def _warm_up(url: str) -> None:
    """One short request, so that the first measured turn pays no start-up cost; shares no prefix with the
    workload."""
    import httpx

    async with httpx.AsyncClient(timeout=120, trust_env=False) as client:
        await chat_turn(
            client, url, [{"role": "user", "content": "Hello"}], 4, TurnResult(-1, -1, time.perf_counter())
        )


async def _info(url: str) -> dict | None:
    import httpx

    try:
        async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
            r = await client.get(url + "/info")
        return {k: r.json().get(k) for k in ("model_id", "model_dtype", "backend", "prefix_caching")}
    except Exception:
        return None


def run(args: argparse.Namespace) -> int:
    """`tgi benchmark multiturn`: returns the exit status (2 for bad arguments, 1 if any request failed)."""
    from tgi.benchmarks import peers

    if min(args.conversations, args.turns, args.max_tokens, args.system_words + 1, args.user_words) < 1:
        print("error: --conversations, --turns, --max-tokens and --user-words must be >= 1", file=sys.stderr)
        return 2
    try:
        targets = [(name, check_loopback(url)) for name, _, url in (s.partition("=") for s in args.server)]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    workload = build_workload(
        args.seed, args.conversations, args.turns, args.system_words, args.user_words, args.max_tokens
    )
    plan = targets or [("cache-on", "true"), ("cache-off", "false")]
    rows, servers = [], []
    for name, where in plan:
        server = None
        try:
            if not targets:
                print(f"starting ours ({name})...", file=sys.stderr, flush=True)
                extra = [*shlex.split(args.ours_args), "--prefix-caching", where]
                server = peers.start_ours(
                    args.model_id, extra, log_dir=args.log_dir, timeout=args.startup_timeout, name=name
                )
                where = server.url
            asyncio.run(_warm_up(where))
            servers.append({"name": name, "url": where, "info": asyncio.run(_info(where))})
            print(f"{name}: {workload.num_requests} requests...", file=sys.stderr, flush=True)
            results, wall = asyncio.run(run_conversations(where, workload))
            rows.append(summarize_run(name, results, wall))
        except RuntimeError as exc:  # a server that did not start
            print(f"error: {exc}", file=sys.stderr)
            return 2
        finally:
            if server is not None:
                server.stop()
    report = build_report(args, workload, rows, servers)
    print(format_markdown(report))
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(report, f, indent=2)
        print(f"\nJSON report: {args.json_path}", file=sys.stderr)
    return 1 if any(r["num_ok"] < r["num_requests"] for r in rows) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tgi benchmark multiturn", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # `python src/tgi/benchmarks/multiturn.py ...`
    sys.exit(main())
