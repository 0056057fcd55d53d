"""The KV cache benchmark (`kv_cache_bench`) on the tiny model: the capacity rows follow the cache's bytes,
the quality rows compare each KV dtype with the model's own cache teacher-forced, the speed rows time decodes,
and the report prints as markdown."""

from __future__ import annotations

import argparse
import json

import pytest

from tgi.benchmarks import kv_cache_bench
from tgi.core.testing.model import write_tiny_llama


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("kv-bench")
    model = write_tiny_llama(root / "m")
    text = root / "text.txt"
    text.write_text(" ".join(f"w{(7 * i) % 250 + 2}" for i in range(80)), encoding="utf-8")
    return model, text


def test_the_report_has_each_kv_dtype_s_capacity_quality_and_speed(tiny, tmp_path, capsys):
    model, text = tiny
    p = argparse.ArgumentParser()
    kv_cache_bench.add_arguments(p)
    out = tmp_path / "report.json"
    args = p.parse_args(
        ["--model-id", str(model), "--kv-dtypes", "int8", "--text", str(text), "--n-ctx", "32",
         "--batch", "2", "--context", "16", "--decode-steps", "3", "--json", str(out)]
    )  # fmt: skip
    assert kv_cache_bench.run(args) == 0
    report = json.loads(out.read_text())
    capacity = {r["kv"]: r for r in report["capacity"]}
    # the tiny model: head size 16 in the backend's dtype (bfloat16 here: 2 bytes a value) against one byte a
    # value and a 4-byte scale
    itemsize = 2 if report["quality"][0]["dtype"] == "bfloat16" else 4
    assert capacity["auto"]["ratio"] == 1 and capacity["int8"]["ratio"] == pytest.approx(16 * itemsize / 20)
    quality = report["quality"]
    assert [(r["kv"], r["dtype"]) for r in quality][-1] == ("auto", "float32")
    assert quality[0]["top1_agreement"] == 1 and quality[0]["max_logprob_diff"] == 0
    assert all(r["decodes"] == 16 and 0.8 <= r["top1_agreement"] <= 1 for r in quality)
    assert all(abs(r["perplexity_change"]) < 0.05 for r in quality)
    assert [(r["kv"], r["context"]) for r in report["speed"]] == [("auto", 16), ("int8", 16)]
    assert all(r["decode_step_ms"] > 0 for r in report["speed"])
    printed = capsys.readouterr().out
    assert "| int8 | int8 (a float32 scale per token and kv head; " in printed
