"""The Predicted Outputs benchmark: a seeded code-edit workload, runs alternating with and without the
prediction, usage's prediction counts read, the report; against our real HTTP layer on the fake engine."""

from __future__ import annotations

import argparse
import asyncio

from server_thread import ServerThread

from fake_engine import REPLY, FakeEngine
from tgi.benchmarks import prediction_bench
from tgi.core.config import EngineConfig
from tgi.server.app import create_app

# the fake engine's tokens are characters: room for the file twice
LIMITS = dict(
    max_input_tokens=4000, max_total_tokens=4096, max_batch_prefill_tokens=4096, max_batch_total_tokens=8192
)


def test_the_workload_is_seeded_and_asks_for_one_rename():
    a = prediction_bench.build_workload(functions=8, seed=1)
    assert a == prediction_bench.build_workload(functions=8, seed=1)
    assert a != prediction_bench.build_workload(functions=8, seed=2)
    assert a.source.count("def sum_") == 8 and a.source.count("    total = 0") == 8
    assert f"`{a.function}` only" in a.prompt and a.source in a.prompt
    assert a.body(10, "x")["prediction"] == {"type": "content", "content": "x"}
    assert "prediction" not in a.body(10)


def test_changed_lines_replace_a_word_in_lines_spread_over_the_text():
    text = "\n".join(f"line {i} of the text" for i in range(10))
    changed = prediction_bench.changed_lines(text, 3)
    diff = [(a, b) for a, b in zip(text.split("\n"), changed.split("\n"), strict=True) if a != b]
    assert [b for _, b in diff] == [
        "line 2 subtotal the text",
        "line 5 subtotal the text",
        "line 7 subtotal the text",
    ]


def test_every_mode_runs_in_rotating_order_and_sends_its_prediction():
    workload = prediction_bench.build_workload(functions=2)
    engine = FakeEngine(config=EngineConfig(model_id="fake/model", **LIMITS), delay=0.001)
    with ServerThread(create_app(engine)) as server:
        runs = asyncio.run(prediction_bench.measure(server.url, workload, max_tokens=6, rounds=2, changed=1))
    assert [r.mode for r in runs] == ["plain", "plain", "file", "answer", "file", "answer", "plain"]
    assert all(r.error is None and r.text == REPLY[:6] and r.completion_tokens == 6 for r in runs)
    tokenizer = engine.tokenizer
    sent = [tokenizer.decode(list(request.prediction)) for request in engine.queued]
    answer = prediction_bench.changed_lines(REPLY[:6], 1)
    # the warm-up and the first plain run, then the rounds
    assert sent == ["", "", "", workload.source, answer, workload.source, answer, ""]
    assert [r.accepted is not None for r in runs] == [False, False, True, True, True, True, False]
    args = argparse.Namespace(functions=2, seed=0, changed_lines=1)
    load = {"before": [0.1, 0.1, 0.1], "after": [0.2, 0.1, 0.1]}
    report = prediction_bench.build_report(args, workload, runs, {"url": server.url}, load)
    assert report["same_text"] and report["modes"]["answer"]["ok"] == 2
    assert set(report["speedup_output_tokens_per_s"]) == {"file", "answer"}
    table = prediction_bench.format_markdown(report)
    assert (
        "| answer |" in table
        and "speed-up (output tok/s, medians): file" in table
        and "best runs: file" in table
    )
    assert "load average before" in table
