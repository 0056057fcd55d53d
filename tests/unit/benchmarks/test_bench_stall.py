"""`tgi benchmark stall`'s report: the gaps summed up per route, and the table a person reads (the measuring
itself runs against a real server in tests/e2e/test_request_costs_e2e.py)."""

from __future__ import annotations

import argparse

from tgi.benchmarks.stall_bench import ROUTES, add_arguments, markdown, summarize


def test_summary_is_in_milliseconds_with_the_largest_and_the_median():
    assert summarize([0.010, 0.012, 0.250, 0.011]) == {"max_ms": 250.0, "p50_ms": 11.5, "n": 4}


def test_the_table_names_the_cpu_and_each_route():
    report = {
        "body_mb": 1.0,
        "machine": {"cpu": "AMD EPYC"},
        "rows": {
            "nothing": summarize([0.01, 0.012]),
            "/tokenize": {**summarize([0.01, 0.03]), "status": 422},
        },
    }
    text = markdown(report)
    assert "Stall beside a 1 MB body (AMD EPYC)" in text
    assert "| /tokenize | 422 | 30.0 | 20.0 | 2 |" in text and "| nothing | - | 12.0 | 11.0 | 2 |" in text


def test_the_flags_default_to_a_local_server_and_every_route():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = parser.parse_args([])
    assert options.url == "http://127.0.0.1:3000" and options.routes.split(",") == list(ROUTES)
