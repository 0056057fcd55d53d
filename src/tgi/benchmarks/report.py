"""The serving benchmark's report: one row per level of each server (`summarize_level`), the ratios of the
first server to the others, the machine, as JSON (`build_report`, schema `SCHEMA`), and as text tables.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import platform
from collections.abc import Sequence

from tgi.benchmarks.client import RequestResult
from tgi.benchmarks.stats import summarize

SCHEMA = "tgi-bench-serving/1"


def level_label(mode: str, level: float) -> str:
    return f"C={level}" if mode == "concurrency" else f"rate={level}/s"


def summarize_level(
    server: str, mode: str, level: float, results: Sequence[RequestResult], duration: float
) -> dict:
    """The report row of one level of one server."""
    ok = [r for r in results if r.ok]
    out_tokens = sum(r.completion_tokens for r in ok)
    prompt_counts = [r.prompt_tokens for r in ok]
    prompt_tokens = sum(prompt_counts) if ok and None not in prompt_counts else None
    duration = max(duration, 1e-9)
    errors = [r.error for r in results if not r.ok]
    tpots = [(r.e2e - r.ttft) / (r.completion_tokens - 1) for r in ok if r.ttft and r.completion_tokens > 1]
    return {
        "server": server,
        "mode": mode,
        "level": None if math.isinf(level) else level,
        "level_label": level_label(mode, level),
        "num_requests": len(results),
        "num_ok": len(ok),
        "num_errors": len(errors),
        "first_error": errors[0] if errors else None,
        "duration_s": duration,
        "prompt_tokens": prompt_tokens,
        "output_tokens": out_tokens,
        "output_tok_s": out_tokens / duration,
        "total_tok_s": (out_tokens + prompt_tokens) / duration if prompt_tokens is not None else None,
        "req_s": len(ok) / duration,
        "ttft_ms": summarize([r.ttft for r in ok if r.ttft is not None], 1000),
        "itl_ms": summarize([x for r in ok for x in r.itls], 1000),
        "tpot_ms": summarize(tpots, 1000),
        "e2e_ms": summarize([r.e2e for r in ok], 1000),
    }


def ratios(rows: Sequence[dict], names: Sequence[str]) -> list[dict]:
    """The first server against each other one, level by level: output tok/s and TTFT p50 ratios."""
    if len(names) < 2:
        return []
    by = {(r["server"], r["level_label"]): r for r in rows}
    out = []
    subject = names[0]
    for r in rows:
        if r["server"] != subject:
            continue
        for peer in names[1:]:
            p = by.get((peer, r["level_label"]))
            if p is None:
                continue
            ttft_s, ttft_p = r["ttft_ms"]["p50"], p["ttft_ms"]["p50"]
            out.append(
                {
                    "level_label": r["level_label"],
                    "subject": subject,
                    "peer": peer,
                    "output_tok_s_ratio": r["output_tok_s"] / p["output_tok_s"]
                    if p["output_tok_s"]
                    else None,
                    "ttft_p50_ratio": ttft_s / ttft_p if ttft_s is not None and ttft_p else None,
                }
            )
    return out


def machine_info() -> dict:
    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu": platform.processor() or None,
    }
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        first = text.split("\n\n", 1)[0]  # the first processor's entry
        fields = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in first.splitlines())}
        if fields.get("model name"):
            info["cpu"] = fields["model name"]
        # vendor, family and model tell machines of one name apart (an "AMD EPYC" of family 26 is Zen 5)
        for key, name in (("vendor_id", "cpu_vendor"), ("cpu family", "cpu_family"), ("model", "cpu_model")):
            if fields.get(key):
                info[name] = fields[key]
        flags = fields.get("flags", "").split()
        info["cpu_features"] = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        info["memory_gib"] = round(kb / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    if os.environ.get("MACHINE_DESCRIPTION"):
        info["description"] = os.environ["MACHINE_DESCRIPTION"]
    return info


def _pct(share: float | None) -> float | None:
    return None if share is None else 100 * share


def _f(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def one_line(row: dict) -> str:
    err = f", {row['num_errors']} errors ({row['first_error']})" if row["num_errors"] else ""
    return (
        f"{row['server']} {row['level_label']}: {_f(row['output_tok_s'])} output tok/s, "
        f"TTFT p50 {_f(row['ttft_ms']['p50'], 0)} ms, ITL p50 {_f(row['itl_ms']['p50'])} ms "
        f"({row['num_ok']}/{row['num_requests']} ok in {row['duration_s']:.1f}s{err})"
        + (f", encoder {100 * share:.0f}% of step time" if (share := row.get("encoder_share")) else "")
    )


def _grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    lines = ["  ".join(str(c).rjust(w) for c, w in zip(r, widths, strict=True)) for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_table(report: dict) -> str:
    """Every level of every server: throughput and TTFT / ITL / E2E percentiles (ms)."""
    header = ["server", "level", "ok", "out tok/s", "tot tok/s", "req/s"]
    for m in ("TTFT", "ITL", "E2E"):
        header += [f"{m} p50", "p90", "p99"]
    roofline = "roofline" in report  # `tgi benchmark serving --roofline`: the shares of the machine's limits
    if roofline:
        header += ["BW %", "peak %"]
    body = []
    for r in report["results"]:
        row = [r["server"], r["level_label"], f"{r['num_ok']}/{r['num_requests']}"]
        row += [_f(r["output_tok_s"]), _f(r["total_tok_s"]), _f(r["req_s"], 2)]
        for key, digits in (("ttft_ms", 0), ("itl_ms", 1), ("e2e_ms", 0)):
            row += [_f(r[key][p], digits) for p in ("p50", "p90", "p99")]
        if roofline:
            row += [_f(_pct(r.get("bandwidth_share")), 0), _f(_pct(r.get("peak_share")), 0)]
        body.append(row)
    return _grid(header, body)


def format_markdown(report: dict) -> str:
    """The issue's table: one row per server, output tok/s per level (then TTFT p50 per level)."""
    labels = list(dict.fromkeys(r["level_label"] for r in report["results"]))
    names = [s["name"] for s in report["servers"]]
    by = {(r["server"], r["level_label"]): r for r in report["results"]}

    def cell(name, label, fn):
        r = by.get((name, label))
        return "-" if r is None else fn(r)

    def table(title, fn):
        lines = [f"| {title} | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
        lines += [f"| {n} | " + " | ".join(cell(n, lab, fn) for lab in labels) + " |" for n in names]
        return "\n".join(lines)

    out = [
        table("output tok/s", lambda r: f"{r['output_tok_s']:.0f}"),
        "",
        table("TTFT p50 (ms)", lambda r: _f(r["ttft_ms"]["p50"], 0)),
    ]
    if "roofline" in report:  # `--roofline`: each level's shares of the machine's measured limits
        peak = next((r["peak"] for r in report["results"] if r.get("peak")), "peak")
        out += ["", table("share of read bandwidth, %", lambda r: _f(_pct(r.get("bandwidth_share")), 0))]
        out += ["", table(f"share of the {peak} peak, %", lambda r: _f(_pct(r.get("peak_share")), 0))]
    if any(r.get("encoder_share") for r in report["results"]):  # the image workload on our server
        out += ["", table("vision encoder, % of step time", lambda r: _f(_pct(r.get("encoder_share")), 0))]
    if report.get("ratios"):
        out += ["", "| ratio (output tok/s) | level | × |", "|---|---|---|"]
        out += [
            f"| {x['subject']} / {x['peer']} | {x['level_label']} | {_f(x['output_tok_s_ratio'], 2)} |"
            for x in report["ratios"]
        ]
    return "\n".join(out)


def options_json(options) -> dict:
    """The run's options as JSON (infinite levels as \"inf\")."""
    out = {k: v for k, v in dataclasses.asdict(options).items() if k != "progress"}
    out["levels"] = ["inf" if math.isinf(x) else x for x in options.levels]  # JSON has no Infinity
    return out


def build_report(options, servers: list[dict], rows: list[dict]) -> dict:
    """The JSON report of a run: `servers` as each target describes itself, `rows` from `summarize_level`."""
    return {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "options": options_json(options),
        "servers": servers,
        "results": rows,
        "ratios": ratios(rows, [s["name"] for s in servers]),
    }
