"""Predicted Outputs' speed (`tgi benchmark prediction`): a code edit with and without OpenAI's `prediction`,
side by side on one server (ours, started here with a default launch, or `--server`).

Workload (generated here, seeded): a Python file of `--functions` small functions (64 tokens each with the
default model's tokenizer: 32 make ~2,000), and a chat request asking to rename the variable `total` in one of
them and to reply with the whole file. Three modes, each streamed greedily (`temperature=0`, `max_tokens` =
the file's tokens + 64):

- `plain`: no prediction;
- `file`: the prediction is the file as it was (what an editor sends). How much it helps depends on how
  closely the model's answer follows the file: a model that copies it but for the renamed lines gets most of
  it accepted; one that writes something else gets little, and pays for the guesses it refuses;
- `answer`: the prediction is the plain answer with `--changed-lines` of its lines changed (a word replaced
  in each, spread over the answer): the answer follows the prediction except on those lines, as an edit that
  changes a few lines of a file follows the file, whatever the model writes.

A first request with the same prompt (one token) puts the prompt in the prefix cache, so that every measured
run reads it alike; then one plain run gives the answer, and `--runs` rounds run each mode once, the order
rotating. Per mode: output tokens/s (completion tokens / E2E), decode tokens/s (tokens after the first / time
after the first), TTFT, E2E (medians), the prediction's accepted and rejected tokens (usage's
`completion_tokens_details`), and whether every run gave the same text (they must: a prediction never changes
the answer). The machine (CPU model and features) and the load average before and after are recorded: other
work on the machine slows every mode.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shlex
import sys
import time
from dataclasses import dataclass

from tgi.benchmarks.client import check_loopback, stream_chat
from tgi.benchmarks.report import machine_info
from tgi.benchmarks.stats import percentile

SCHEMA = "tgi.benchmarks.prediction/1"
NOUNS = ("price", "weight", "count", "size", "score", "amount", "length", "height")
MODES = ("plain", "file", "answer")


@dataclass(frozen=True)
class Workload:
    source: str  # the file as it is: the prediction
    function: str  # the function whose `total` is to be renamed
    prompt: str  # the user's message

    def body(self, max_tokens: int, prediction: str | None = None) -> dict:
        body = {
            "messages": [{"role": "user", "content": self.prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if prediction is not None:
            body["prediction"] = {"type": "content", "content": prediction}
        return body


def build_workload(functions: int = 32, seed: int = 0) -> Workload:
    """The file of `functions` functions, each summing one field of the orders that pass a test on another
    into a variable `total`, and the request to rename it in the middle one."""
    rng = random.Random(seed)
    lines = ['"""Order statistics."""', "", "from dataclasses import dataclass", "", ""]
    lines += ["@dataclass", "class Order:", *(f"    {noun}: float" for noun in NOUNS), "", ""]
    names = []
    for i in range(functions):
        field, test = rng.sample(NOUNS, 2)
        bound = rng.randrange(1, 50)
        names.append(f"sum_{field}_over_{test}_{i}")
        lines += [
            f"def {names[-1]}(orders):",
            f'    """Add up the {field} of the orders whose {test} is above {bound}."""',
            "    total = 0",
            "    for order in orders:",
            f"        if order.{test} > {bound}:",
            f"            total += order.{field}",
            "    return total",
            "",
            "",
        ]
    source = "\n".join(lines).rstrip() + "\n"
    function = names[len(names) // 2]
    prompt = (
        f"Rename the variable `total` to `subtotal` in the function `{function}` only, and reply with the "
        f"whole file, nothing else.\n\n```python\n{source}```"
    )
    return Workload(source, function, prompt)


def changed_lines(text: str, n: int) -> str:
    """`text` with `n` of its lines (spread evenly over it, non-blank) changed: their middle word replaced."""
    lines = text.split("\n")
    candidates = [i for i, line in enumerate(lines) if line.strip()]
    for j in range(n):
        if not candidates:
            break
        i = candidates[(j + 1) * len(candidates) // (n + 1)]
        words = lines[i].split(" ")
        middle = min((k for k, w in enumerate(words) if w), key=lambda k: abs(k - len(words) // 2))
        words[middle] = "subtotal" if words[middle] != "subtotal" else "total"
        lines[i] = " ".join(words)
    return "\n".join(lines)


@dataclass
class Run:
    mode: str  # one of MODES
    start: float
    end: float = 0.0
    ttft: float | None = None
    text: str = ""
    completion_tokens: int = 0
    accepted: int | None = None
    rejected: int | None = None
    error: str | None = None

    @property
    def e2e(self) -> float:
        return self.end - self.start


async def one_run(client, url: str, body: dict, run: Run) -> None:
    """Stream one chat completion into `run`; errors go to `error`."""

    def usage(u: dict) -> None:
        run.completion_tokens = u["completion_tokens"]
        details = u.get("completion_tokens_details") or {}
        run.accepted = details.get("accepted_prediction_tokens")
        run.rejected = details.get("rejected_prediction_tokens")

    await stream_chat(client, url, body, run, usage)


async def measure(url: str, workload: Workload, max_tokens: int, rounds: int, changed: int = 3) -> list[Run]:
    """A warm-up (the prompt into the prefix cache), a plain run (the answer the `answer` mode's prediction
    is made from), then `rounds` rounds of every mode, the order rotating."""
    import httpx

    url = check_loopback(url)
    runs: list[Run] = []

    async def timed(mode: str, prediction: str | None) -> Run:
        run = Run(mode, time.perf_counter())
        await one_run(client, url, workload.body(max_tokens, prediction), run)
        runs.append(run)
        print(f"  {mode}: {run.completion_tokens} tokens in {run.e2e:.1f} s", file=sys.stderr, flush=True)
        return run

    async with httpx.AsyncClient(timeout=3600, trust_env=False) as client:
        await one_run(client, url, workload.body(1), Run("warm-up", time.perf_counter()))
        answer = changed_lines((await timed("plain", None)).text, changed)
        predictions = {"plain": None, "file": workload.source, "answer": answer}
        for i in range(rounds):
            for mode in MODES[i % 3 :] + MODES[: i % 3]:
                await timed(mode, predictions[mode])
    return runs


def summarize_mode(runs: list[Run]) -> dict:
    ok = [r for r in runs if r.error is None and r.completion_tokens > 0 and r.ttft is not None]
    out_rates = [r.completion_tokens / r.e2e for r in ok]
    decode_rates = [(r.completion_tokens - 1) / (r.e2e - r.ttft) for r in ok if r.e2e > r.ttft]
    return {
        "runs": len(runs),
        "ok": len(ok),
        "first_error": next((r.error for r in runs if r.error), None),
        "completion_tokens": [r.completion_tokens for r in ok],
        "output_tokens_per_s": percentile(out_rates, 50) if out_rates else None,
        "output_tokens_per_s_best": max(
            out_rates, default=None
        ),  # the run the machine's other load slowed least
        "decode_tokens_per_s": percentile(decode_rates, 50) if decode_rates else None,
        "ttft_s": percentile([r.ttft for r in ok], 50) if ok else None,
        "e2e_s": percentile([r.e2e for r in ok], 50) if ok else None,
        "accepted_prediction_tokens": [r.accepted for r in ok],
        "rejected_prediction_tokens": [r.rejected for r in ok],
    }


def build_report(args, workload: Workload, runs: list[Run], server: dict, load: dict) -> dict:
    modes = {m: summarize_mode([r for r in runs if r.mode == m]) for m in MODES}
    plain, plain_best = modes["plain"]["output_tokens_per_s"], modes["plain"]["output_tokens_per_s_best"]
    texts = {r.text for r in runs if r.error is None}
    return {
        "schema": SCHEMA,
        "machine": machine_info(),
        "load_average": load,
        "server": server,
        "workload": {
            "functions": args.functions,
            "seed": args.seed,
            "renamed_in": workload.function,
            "changed_lines": args.changed_lines,
        },
        "modes": modes,
        "speedup_output_tokens_per_s": {
            m: modes[m]["output_tokens_per_s"] / plain if plain and modes[m]["output_tokens_per_s"] else None
            for m in MODES[1:]
        },
        "speedup_best_output_tokens_per_s": {
            m: modes[m]["output_tokens_per_s_best"] / plain_best
            if plain_best and modes[m]["output_tokens_per_s_best"]
            else None
            for m in MODES[1:]
        },
        "same_text": len(texts) == 1,
    }


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_markdown(report: dict) -> str:
    rows = [
        "| mode | output tok/s | best | decode tok/s | TTFT s | E2E s | tokens | accepted / rejected |",
        "|---" * 8 + "|",
    ]
    for name, m in report["modes"].items():
        counts = ", ".join(
            f"{a}/{r}"
            for a, r in zip(m["accepted_prediction_tokens"], m["rejected_prediction_tokens"], strict=True)
        )
        tokens = ", ".join(str(t) for t in m["completion_tokens"])
        rows.append(
            f"| {name} | {_f(m['output_tokens_per_s'])} | {_f(m['output_tokens_per_s_best'])} "
            f"| {_f(m['decode_tokens_per_s'])} | {_f(m['ttft_s'], 2)} "
            f"| {_f(m['e2e_s'])} | {tokens} | {counts if name != 'plain' else '-'} |"
        )
    machine, load = report["machine"], report["load_average"]
    rows += [
        "",
        "speed-up (output tok/s, medians): "
        + ", ".join(f"{m} {_f(x, 2)}x" for m, x in report["speedup_output_tokens_per_s"].items())
        + "; best runs: "
        + ", ".join(f"{m} {_f(x, 2)}x" for m, x in report["speedup_best_output_tokens_per_s"].items())
        + f"; the same text in every run: {report['same_text']}",
        f"CPU: {machine.get('cpu')} ({', '.join(machine.get('cpu_features', []))}), {machine.get('cpu_count')} "
        f"cores; load average before {load['before']}, after {load['after']}",
    ]
    return "\n".join(rows)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--server", default=None, metavar="URL", help="a running server (loopback); default: start ours"
    )
    p.add_argument("--model-id", default=None, help="for the server started here; default: the default model")
    p.add_argument("--ours-args", default="", help="more `tgi launch` flags for the server started here")
    p.add_argument(
        "--functions", type=int, default=32, help="functions in the file (default 32: ~2,000 tokens)"
    )
    p.add_argument("--runs", type=int, default=2, help="rounds of the three modes (default 2)")
    p.add_argument(
        "--changed-lines", type=int, default=3, help="lines changed in the `answer` prediction (default 3)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--startup-timeout", type=float, default=600.0)
    p.add_argument("--log-dir", default=None, help="where the started server's log goes")
    p.add_argument("--json", dest="json_path", default=None, help="write the report as JSON here")


def _tokens(url: str, text: str) -> int:
    import httpx

    r = httpx.post(url + "/tokenize", json={"inputs": text}, timeout=60, trust_env=False)
    r.raise_for_status()
    return len(r.json())


def run(args: argparse.Namespace) -> int:
    """`tgi benchmark prediction`: the exit status (2 for bad arguments, 1 if a run failed or the texts differ)."""
    from tgi.benchmarks import peers

    if args.functions < 1 or args.runs < 1:
        print("error: --functions and --runs must be >= 1", file=sys.stderr)
        return 2
    workload = build_workload(args.functions, args.seed)
    server = None
    try:
        url = check_loopback(args.server) if args.server else None
        if url is None:
            print("starting ours (default launch)...", file=sys.stderr, flush=True)
            server = peers.start_ours(
                args.model_id, shlex.split(args.ours_args), log_dir=args.log_dir, timeout=args.startup_timeout
            )
            url = server.url
        max_tokens = _tokens(url, workload.source) + 64
        before = os.getloadavg()
        runs = asyncio.run(measure(url, workload, max_tokens, args.runs, args.changed_lines))
        load = {"before": [round(x, 2) for x in before], "after": [round(x, 2) for x in os.getloadavg()]}
    except (ValueError, RuntimeError) as exc:  # a bad URL, a server that did not start
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if server is not None:
            server.stop()
    report = build_report(args, workload, runs, {"url": url, "args": args.ours_args}, load)
    print(format_markdown(report))
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(report, f, indent=2)
        print(f"\nJSON report: {args.json_path}", file=sys.stderr)
    failed = any(m["ok"] < m["runs"] for m in report["modes"].values())
    return 1 if failed or not report["same_text"] else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tgi benchmark prediction", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # `python src/tgi/benchmarks/prediction_bench.py ...`
    sys.exit(main())
