"""The benchmark package: prompt sets, percentiles, the load generator against fake SSE servers (timings
known in advance), the report's shape and the plot (the engine micro-benchmark: test_engine_bench.py)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import pathlib
import random
import socket

import pytest
from server_thread import ServerThread as _ServerThread
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from tgi.benchmarks.client import check_loopback
from tgi.benchmarks.prompts import PREFIX, build_prompts, peers_prompts, sharegpt_like_prompts
from tgi.benchmarks.report import SCHEMA, format_markdown, format_table
from tgi.benchmarks.serving import Options, Target, parse_levels, parse_server, run_benchmark
from tgi.benchmarks.stats import percentile, summarize

TTFT, ITL, TOKENS = 0.12, 0.04, 5  # the fake server's timings and output length


# -- prompt sets -------------------------------------------------------------------------------------------
def test_peers_prompts_are_seeded_and_20_to_300_words():
    a, b = peers_prompts(200, seed=3), peers_prompts(200, seed=3)
    assert a == b
    assert a != peers_prompts(200, seed=4)
    for p in a:
        assert p.text.startswith(PREFIX)
        words = p.text[len(PREFIX) :].split()
        assert len(words) == p.num_words
        assert 20 <= p.num_words <= 300
        assert p.max_tokens == 128
    assert min(p.num_words for p in a) < 60 and max(p.num_words for p in a) > 260  # spans the range


def test_sharegpt_like_lengths_are_seeded_and_long_tailed():
    a = sharegpt_like_prompts(500, seed=1)
    assert a == sharegpt_like_prompts(500, seed=1)
    words = sorted(p.num_words for p in a)
    outs = sorted(p.max_tokens for p in a)
    assert words[0] >= 4 and words[-1] <= 1000 and outs[0] >= 4 and outs[-1] <= 512
    assert words[len(words) // 2] < sum(words) / len(words)  # median below mean: a long tail
    assert {p.max_tokens for p in sharegpt_like_prompts(20, max_tokens=64)} == {64}
    assert build_prompts("peers", 5, max_tokens=16)[0].max_tokens == 16
    with pytest.raises(ValueError, match="unknown prompt set"):
        build_prompts("nope", 1)


# -- statistics --------------------------------------------------------------------------------------------
def test_percentile_interpolates_like_numpy():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([4, 1, 3, 2], 0) == 1 and percentile([4, 1, 3, 2], 100) == 4
    assert percentile([10], 99) == 10
    assert math.isnan(percentile([], 50))
    np = pytest.importorskip("numpy")
    xs = [random.Random(0).random() for _ in range(37)]
    for q in (50, 90, 99):
        assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
    with pytest.raises(ValueError):
        percentile(xs, 101)


def test_summarize_scales_and_handles_empty():
    s = summarize([0.1, 0.2, 0.3], scale=1000)
    assert s["mean"] == pytest.approx(200) and s["p50"] == pytest.approx(200)
    assert s["min"] == pytest.approx(100) and s["max"] == pytest.approx(300)
    assert set(summarize([])) == set(s) and all(v is None for v in summarize([]).values())


def test_levels_and_server_specs():
    assert parse_levels("1, 8,32", allow_inf=False) == [1, 8, 32]
    assert parse_levels("2,inf", allow_inf=True) == [2, math.inf]
    for bad in ("0", "1.5", "inf", ""):
        with pytest.raises(ValueError):
            parse_levels(bad, allow_inf=False)
    t = parse_server("ours=http://127.0.0.1:3000/,api=tgi", "openai")
    assert (t.name, t.url, t.api) == ("ours", "http://127.0.0.1:3000", "tgi")
    with pytest.raises(ValueError):
        parse_server("http://127.0.0.1:3000", "openai")


@pytest.mark.parametrize("url", ["http://example.com", "http://10.0.0.1:80", "ftp://127.0.0.1", "localhost"])
def test_only_loopback_urls(url):
    with pytest.raises(ValueError):
        check_loopback(url)


@pytest.mark.parametrize("url", ["http://localhost:1", "http://127.0.0.2:80", "http://[::1]:8000"])
def test_loopback_urls_pass(url):
    assert check_loopback(url + "/") == url


# -- a fake SSE server with known timings -------------------------------------------------------------------
def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


#: how long a held stream waits for the others it is held for (a liveness bound, far above their arrival)
HOLD_LIMIT_S = 10.0


def _fake_app(seen: list, flow: dict) -> Starlette:
    """`flow`: `streams` open now and the most open at once (`most`); with `hold` set, each completions
    stream waits (up to HOLD_LIMIT_S) until that many are open before its first token, so that requests sent
    together are seen together, whatever the machine's load."""

    async def held() -> None:
        flow["streams"] += 1
        flow["most"] = max(flow["most"], flow["streams"])
        waited = 0.0
        while flow["hold"] and flow["streams"] < flow["hold"] and waited < HOLD_LIMIT_S:
            await asyncio.sleep(0.01)
            waited += 0.01

    async def completions(request):
        body = await request.json()
        seen.append(body)
        if body["prompt"].endswith("FAIL"):
            return JSONResponse({"error": "boom"}, status_code=500)
        n = body["max_tokens"]

        async def stream():
            try:
                await held()
                async for chunk in tokens():
                    yield chunk
            finally:
                flow["streams"] -= 1

        async def tokens():
            await asyncio.sleep(TTFT)
            for i in range(n):
                if i:
                    await asyncio.sleep(ITL)
                last = i == n - 1
                yield _sse(
                    {"choices": [{"index": 0, "text": f" t{i}", "finish_reason": "length" if last else None}]}
                )
            # llama.cpp-style closing chunk (no text), then the usage chunk: neither is a token
            yield _sse({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
            yield _sse(
                {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n}}
            )
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def generate_stream(request):
        body = await request.json()
        seen.append(body)
        n = body["parameters"]["max_new_tokens"]

        async def stream():
            await asyncio.sleep(TTFT)
            for i in range(n):
                if i:
                    await asyncio.sleep(ITL)
                last = i == n - 1
                details = (
                    {"finish_reason": "length", "generated_tokens": n, "input_length": 9} if last else None
                )
                yield _sse(
                    {"index": i + 1, "token": {"id": i, "text": "x", "special": False}, "details": details}
                )

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def info(request):
        return JSONResponse(
            {"model_dtype": "bfloat16", "backend": "cpu", "kernels": {"greedy pick": "native"}}
        )

    return Starlette(
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/generate_stream", generate_stream, methods=["POST"]),
            Route("/info", info, methods=["GET"]),
        ]
    )


@pytest.fixture(scope="module")
def fake():
    seen: list = []
    flow = {"streams": 0, "most": 0, "hold": 0}
    with _ServerThread(_fake_app(seen, flow)) as server:
        server.seen, server.flow = seen, flow
        yield server


def _options(**kw) -> Options:
    base = dict(levels=[2], num_requests=4, max_tokens=TOKENS, warmup_requests=0, progress=False)
    return Options(**{**base, **kw})


@pytest.mark.parametrize("api", ["openai", "tgi"])
def test_closed_loop_measures_ttft_itl_and_throughput(fake, api):
    fake.seen.clear()
    report = asyncio.run(run_benchmark([Target("fake", fake.url, api)], _options()))
    [row] = report["results"]
    assert (row["num_requests"], row["num_ok"], row["num_errors"]) == (4, 4, 0)
    assert row["output_tokens"] == 4 * TOKENS
    assert row["prompt_tokens"] == 4 * (7 if api == "openai" else 9)
    # 2 clients x 2 requests in turn, each TTFT + 4 ITL long
    one = TTFT + (TOKENS - 1) * ITL
    assert 2 * one <= row["duration_s"] < 2 * one + 1.0
    assert row["output_tok_s"] == pytest.approx(row["output_tokens"] / row["duration_s"])
    assert row["total_tok_s"] == pytest.approx(
        (row["output_tokens"] + row["prompt_tokens"]) / row["duration_s"]
    )
    assert row["req_s"] == pytest.approx(4 / row["duration_s"])
    assert TTFT * 1000 <= row["ttft_ms"]["p50"] < TTFT * 1000 + 250
    assert ITL * 1000 * 0.8 <= row["itl_ms"]["p50"] < ITL * 1000 + 100
    assert one * 1000 <= row["e2e_ms"]["p50"] < one * 1000 + 400
    # what went over the wire
    if api == "openai":
        body = fake.seen[0]
        assert body["stream"] and body["ignore_eos"] and body["stream_options"] == {"include_usage": True}
        assert body["max_tokens"] == TOKENS and body["temperature"] == 0
    else:
        params = fake.seen[0]["parameters"]
        assert params["max_new_tokens"] == TOKENS and params["details"] and not params["do_sample"]
        assert "ignore_eos" not in params  # TGI's API has none


def test_poisson_rate_inf_sends_everything_at_once(fake):
    fake.flow.update(
        most=0, hold=4
    )  # each stream starts once all four are open: a sender in turn never gets there
    try:
        options = _options(mode="rate", levels=[math.inf])
        report = asyncio.run(run_benchmark([Target("fake", fake.url)], options))
    finally:
        fake.flow["hold"] = 0
    [row] = report["results"]
    assert row["num_ok"] == 4 and row["level"] is None and row["level_label"] == "rate=inf/s"
    assert fake.flow["most"] == 4  # all four open at once, seen by the server itself (not a clock)


def test_report_shape_tables_and_side_by_side_ratios(fake, tmp_path):
    targets = [Target("a", fake.url), Target("b", fake.url, "tgi")]
    report = asyncio.run(run_benchmark(targets, _options(levels=[1, 2], num_requests=2)))
    text = json.dumps(report, allow_nan=False)  # strict JSON
    assert json.loads(text)["schema"] == SCHEMA
    assert {"created", "machine", "options", "servers", "results", "ratios"} <= set(report)
    # what produced the figures: each server's /info, and the CPU (vendor, family and model where Linux says)
    assert report["servers"][0]["info"] == {
        "model_dtype": "bfloat16",
        "backend": "cpu",
        "kernels": {"greedy pick": "native"},
    }
    if os.path.exists("/proc/cpuinfo"):
        assert {"cpu", "cpu_vendor", "cpu_family", "cpu_model", "cpu_features"} <= set(report["machine"])
    assert [(r["server"], r["level_label"]) for r in report["results"]] == [
        ("a", "C=1"),
        ("b", "C=1"),
        ("a", "C=2"),
        ("b", "C=2"),
    ]
    for r in report["results"]:
        for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
            assert set(r[key]) == {"mean", "p50", "p90", "p99", "min", "max"}
    assert [(x["subject"], x["peer"], x["level_label"]) for x in report["ratios"]] == [
        ("a", "b", "C=1"),
        ("a", "b", "C=2"),
    ]
    assert 0.3 < report["ratios"][0]["output_tok_s_ratio"] < 3
    table = format_table(report)
    assert "TTFT p50" in table and table.count("\n") == 5
    md = format_markdown(report)
    assert "| output tok/s | C=1 | C=2 |" in md and "| a / b | C=1 |" in md


def test_failed_requests_are_counted_not_raised(fake):
    prompts_fail = Target("fake", fake.url)
    report = asyncio.run(run_benchmark([prompts_fail], _options(num_requests=2, request_timeout=0.05)))
    [row] = report["results"]
    assert row["num_errors"] == 2 and "timed out" in row["first_error"]
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    report = asyncio.run(run_benchmark([Target("down", closed)], _options(num_requests=2)))
    assert report["results"][0]["num_errors"] == 2 and report["results"][0]["output_tok_s"] == 0


def test_http_error_is_reported(fake, monkeypatch):
    import tgi.benchmarks.serving as serving

    real = serving.build_prompts
    monkeypatch.setattr(
        serving,
        "build_prompts",
        lambda *a: [type(p)(p.text + " FAIL", p.max_tokens, p.num_words) for p in real(*a)],
    )
    report = asyncio.run(run_benchmark([Target("fake", fake.url)], _options(num_requests=2)))
    assert report["results"][0]["num_errors"] == 2 and "HTTP 500" in report["results"][0]["first_error"]


def test_cli_writes_json_and_plot(fake, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from tgi.server.cli.main import main

    out, png = tmp_path / "r.json", tmp_path / "r.png"
    argv = ["benchmark", "serving", "--server", f"fake={fake.url}", "--concurrency", "2"]
    argv += ["--num-requests", "2", "--max-tokens", "3", "--no-progress", "--warmup-requests", "1"]
    assert main([*argv, "--json", str(out), "--plot", str(png), "--markdown"]) == 0
    report = json.loads(out.read_text())
    assert report["results"][0]["output_tokens"] == 6
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| fake |" in capsys.readouterr().out
    assert main(["benchmark", "serving", "--server", "x=http://example.com:80"]) == 2


def test_our_servers_stream_format(tmp_path):
    """The real HTTP layer (on the fake engine): OpenAI usage and ignore_eos, TGI details, both parsed."""
    from fake_engine import FakeEngine
    from tgi.core.config import EngineConfig
    from tgi.server.app import create_app

    config = EngineConfig(
        model_id="fake/model",
        max_input_tokens=4000,
        max_total_tokens=4096,
        max_batch_prefill_tokens=4096,
        max_batch_total_tokens=8192,
    )
    with _ServerThread(create_app(FakeEngine(config=config, delay=0.002))) as server:
        targets = [Target("openai", server.url), Target("tgi", server.url, "tgi")]
        report = asyncio.run(run_benchmark(targets, _options(max_tokens=30)))
    openai, tgi = report["results"]
    assert openai["num_ok"] == 4 and openai["output_tokens"] == 4 * 30  # through EOS: ignore_eos works
    assert openai["prompt_tokens"] and openai["itl_ms"]["p50"] is not None
    assert tgi["num_ok"] == 4 and 0 < tgi["output_tokens"] <= 4 * 30 and tgi["prompt_tokens"]


# -- the plot ----------------------------------------------------------------------------------------------
def test_plot_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    from tgi.benchmarks.plot import plot_report

    def row(server, c, tok_s, ttft):
        stats = {"mean": ttft, "p50": ttft, "p90": ttft, "p99": ttft, "min": ttft, "max": ttft}
        return {
            "server": server,
            "level_label": f"C={c}",
            "output_tok_s": tok_s,
            "ttft_ms": stats,
            "itl_ms": stats,
        }

    report = {
        "servers": [{"name": "ours"}, {"name": "peer"}],
        "results": [
            row("ours", 1, 60, 30),
            row("ours", 8, 300, 80),
            row("peer", 1, 50, 40),
            row("peer", 8, 140, 90),
        ],
        "machine": {"cpu": "test", "cpu_count": 2},
    }
    path = plot_report(report, str(tmp_path / "p.png"))
    data = pathlib.Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
