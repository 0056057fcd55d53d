"""The multi-turn chat benchmark: a seeded workload, each turn resending the history with the last reply,
usage's cached tokens read, the report and its ratios; against our real HTTP layer on the fake engine."""

from __future__ import annotations

import argparse
import asyncio
import json

from server_thread import ServerThread

from fake_engine import REPLY, FakeEngine
from tgi.benchmarks import multiturn
from tgi.core.config import EngineConfig
from tgi.server.app import create_app


def test_workload_is_seeded_and_shares_only_the_system_prompt():
    a = multiturn.build_workload(seed=1, conversations=3, turns=2, system_words=50, user_words=5)
    assert a == multiturn.build_workload(seed=1, conversations=3, turns=2, system_words=50, user_words=5)
    assert a != multiturn.build_workload(seed=2, conversations=3, turns=2, system_words=50, user_words=5)
    assert len(a.system.split()) == 7 + 50 and a.num_requests == 6
    questions = [q for conv in a.user_turns for q in conv]
    assert len(set(questions)) == 6 and all(len(q.split()) == 2 + 5 for q in questions)


def _engine(cached: tuple[int, ...]) -> FakeEngine:
    config = EngineConfig(
        model_id="fake/model",
        max_input_tokens=4000,
        max_total_tokens=4096,
        max_batch_prefill_tokens=4096,
        max_batch_total_tokens=8192,
    )
    return FakeEngine(config=config, delay=0.001, cached_tokens=cached)


def test_conversations_resend_their_history_and_read_usage():
    workload = multiturn.build_workload(conversations=2, turns=3, system_words=20, user_words=3, max_tokens=6)
    engine = _engine(cached=(0, 0, 10, 10, 20, 20))
    with ServerThread(create_app(engine)) as server:
        results, wall = asyncio.run(multiturn.run_conversations(server.url, workload))
    assert [(r.conversation, r.turn) for r in results] == [(c, t) for c in range(2) for t in range(3)]
    assert all(r.error is None and r.text == REPLY[:6] and r.completion_tokens == 6 for r in results)
    prompts = ["".join(map(chr, ids)) for ids, _ in engine.requests]
    # each conversation's last turn carries the system prompt, every earlier question and reply
    for c in range(2):
        last = next(p for p in reversed(prompts) if workload.user_turns[c][2] in p)
        assert last.startswith("<system>" + workload.system) and last.count("<assistant>" + REPLY[:6]) == 2
        assert all(q in last for q in workload.user_turns[c])
    row = multiturn.summarize_run("cache-on", results, wall)
    assert row["num_ok"] == 6 and row["cached_tokens"] == 60 and row["output_tokens"] == 36
    assert row["prompt_tokens"] == sum(len(p) for p in prompts)
    assert set(row["ttft_p50_ms_by_turn"]) == {"1", "2", "3"} and row["ttft_ms"]["p50"] > 0


def test_report_ratios_and_table(tmp_path):
    def row(name, ttft, tps):
        return {
            "name": name, "num_requests": 4, "num_ok": 4, "ttft_ms": {"p50": ttft, "p90": ttft * 2},
            "ttft_p50_ms_by_turn": {"1": ttft, "2": ttft}, "total_tokens_per_s": tps, "output_tokens_per_s": 1.0,
            "cached_tokens": 0, "prompt_tokens": 10,
        }  # fmt: skip

    args = argparse.Namespace(seed=0, system_words=10, user_words=2)
    workload = multiturn.build_workload(conversations=2, turns=2, system_words=10, user_words=2)
    report = multiturn.build_report(
        args, workload, [row("cache-on", 100, 300), row("cache-off", 800, 100)], []
    )
    assert report["ratios"] == {"ttft_p50_off_over_on": 8.0, "total_tokens_per_s_on_over_off": 3.0}
    assert report["machine"]["cpu_count"] >= 1 and report["workload"]["conversations"] == 2
    table = multiturn.format_markdown(report)
    assert "| cache-on | 100 | 200 | 100 | 100 | 300.0 |" in table and "8.0x lower" in table
    json.dumps(report)


def test_cli_against_a_running_server(tmp_path, capsys):
    from tgi.server.cli.main import main

    out = tmp_path / "multiturn.json"
    with ServerThread(create_app(_engine(cached=()))) as server:
        argv = ["benchmark", "multiturn", "--server", f"fake={server.url}", "--conversations", "2"]
        argv += ["--turns", "2", "--system-words", "10", "--max-tokens", "3", "--json", str(out)]
        assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["results"][0]["num_ok"] == 4 and report["servers"][0]["info"]["prefix_caching"] is True
    assert "| fake |" in capsys.readouterr().out
    assert main(["benchmark", "multiturn", "--server", "x=http://example.com:1"]) == 2
