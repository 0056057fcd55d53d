"""The vision encoder's share of the step time, read from our server's `/metrics` around a level."""

from __future__ import annotations

import pytest

from tgi.benchmarks.report import format_markdown, one_line
from tgi.benchmarks.step_share import encoder_share, parse_step_times

PAGE = """# HELP tgi_step_seconds_total Time in the model's steps (forward and sampling), s
# TYPE tgi_step_seconds_total counter
tgi_step_seconds_total 12.5
# TYPE tgi_encoder_seconds_total counter
tgi_encoder_seconds_total 2.5
tgi_prefix_cache_hit_tokens_total 3.0
"""


def test_the_counters_are_read_and_a_page_without_them_gives_none():
    assert parse_step_times(PAGE) == (12.5, 2.5)
    assert parse_step_times("tgi_step_seconds_total 1.0\n") is None  # a server without the encoder's
    assert parse_step_times("llama_cpp:prompt_tokens_total 5\n") is None


def test_the_share_is_the_encoders_seconds_over_the_steps_between_two_readings():
    assert encoder_share((10.0, 2.0), (14.0, 3.0)) == pytest.approx(0.25)
    assert encoder_share(None, (14.0, 3.0)) is None
    assert encoder_share((10.0, 2.0), (10.0, 2.0)) is None  # no step ran


def _row(server: str, share: float | None) -> dict:
    stats = {"p50": 10.0, "p90": 11.0, "p99": 12.0}
    return {
        "server": server, "level_label": "C=1", "num_ok": 8, "num_requests": 8, "num_errors": 0,
        "duration_s": 4.0, "output_tok_s": 100.0, "ttft_ms": stats, "itl_ms": stats, "encoder_share": share,
    }  # fmt: skip


def test_the_share_is_reported_beside_the_level_where_a_server_has_one():
    assert one_line(_row("ours", 0.314)).endswith(", encoder 31% of step time")
    assert "encoder" not in one_line(_row("llama.cpp", None))
    report = {"servers": [{"name": "ours"}, {"name": "llama.cpp"}], "results": [_row("ours", 0.314)]}
    report["results"].append(_row("llama.cpp", None))
    table = format_markdown(report)
    assert "| vision encoder, % of step time | C=1 |" in table
    assert "| ours | 31 |" in table and "| llama.cpp | - |" in table
    report["results"] = [_row("ours", None)]
    assert "vision encoder" not in format_markdown(report)  # no image workload: no such table
