"""`tgi benchmark guided`'s report (the measurement itself needs the model: src/tgi/benchmarks/README.md)."""

from __future__ import annotations

from tgi.benchmarks.guided_bench import markdown


def test_markdown_report():
    result = {
        "machine": {"cpu": "AMD EPYC", "cpu_features": ["avx2", "avx512f"], "cpu_count": 2},
        "dtype": "bfloat16",
        "compile": {
            "cold_ms": {"a": 1.0, "b": 3.0},
            "cold_ms_median": 2.0,
            "cold_ms_max": 3.0,
            "cached_ms_median": 0.001,
        },
        "steps": [
            {
                "batch_size": 32,
                "schema": "free strings",
                "step_ms_p50_unconstrained": 30.0,
                "step_ms_p50_json_schema": 31.2,
                "mask_ms_p50": 0.4,
                "slowdown_pct": 4.0,
            }
        ],
    }
    text = markdown(result)
    assert (
        "AMD EPYC (avx2, avx512f)" in text
        and "| 32 | free strings | 30.00 | 31.20 | 0.400 | +4.0 % |" in text
    )
    assert "2 grammars): median 2.00 ms, max 3.00 ms; cached lookup 1.0 us" in text
