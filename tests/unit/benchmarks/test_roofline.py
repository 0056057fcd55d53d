"""`tgi benchmark roofline`: the native loops count what they ran, the weights' cost is read from a real GGUF, and
serving levels become shares of the measured limits. No assertion here rests on how fast this machine is."""

from __future__ import annotations

import argparse
import json
import os

import pytest

from tgi.backends.cpu import native
from tgi.benchmarks import report as report_mod
from tgi.benchmarks.peers import default_gguf
from tgi.benchmarks.roofline import (
    Roofline,
    WeightCost,
    add_arguments,
    reference_peak,
    run,
    serving_fractions,
    weight_cost,
)
from tgi.benchmarks.serving_cli import add_roofline

#: multiply-adds one iteration of each loop does (roofline.cpp: 12 accumulators; AMX: four tiles)
PER_ITERATION = {
    "f32-fma-avx2": 8 * 12,
    "f32-fma-avx512": 16 * 12,
    "bf16-dot-avx512": 32 * 12,
    "int8-avx2": 32 * 12,
    "int8-vnni-avx512": 64 * 12,
    "bf16-amx": 4 * 16 * 16 * 32,
    "int8-amx": 4 * 16 * 16 * 64,
}


def test_every_loop_this_cpu_runs_counts_its_multiply_adds_per_thread():
    lib = native.load()
    names = lib.roofline_peaks()
    assert names, "an x86-64 CPU with AVX2 runs at least the AVX2 loops"
    assert set(names) <= set(PER_ITERATION)
    for name in names:
        for threads in (1, 2):
            seconds, macs = lib.roofline_peak(name, 1000, threads)
            assert seconds > 0
            assert macs == PER_ITERATION[name] * 1000 * min(threads, len(os.sched_getaffinity(0)))


def test_an_unknown_loop_is_refused_by_name():
    with pytest.raises(RuntimeError, match="no loop named fp4-magic"):
        native.load().roofline_peak("fp4-magic", 10, 1)


def test_the_read_counts_every_byte_of_every_pass():
    import torch

    buffer = torch.ones(1 << 20, dtype=torch.uint8)
    seconds, read = native.load().roofline_read(buffer, 3, 1)
    assert seconds > 0 and read == 3 * (1 << 20)
    with pytest.raises(RuntimeError, match="uint8"):
        native.load().roofline_read(torch.ones(16, dtype=torch.float32), 1, 1)


def test_the_default_models_weights_cost_their_bytes_and_one_multiply_add_per_weight():
    cost = weight_cost(default_gguf())
    # SmolLM2-135M: 135M parameters, its output head tied to the token embedding (read every step), Q4_1
    assert cost.products == "int8"
    # 106,168,320 weights in Q4_1 layers (20 bytes per 32) and the 28,311,552 of the Q8_0 tied head (34 per 32)
    assert cost.macs_per_token == 106_168_320 + 28_311_552
    assert cost.bytes_per_step == 106_168_320 * 20 // 32 + 28_311_552 * 34 // 32


ROOF = Roofline(
    cpu="test",
    threads=2,
    buffer_bytes=1 << 28,
    read_bytes_per_s=20e9,
    peaks={"int8-avx2": 100e9, "int8-vnni-avx512": 400e9, "bf16-dot-avx512": 200e9, "f32-fma-avx2": 50e9},
)


def test_the_reference_peak_is_the_best_path_the_kernels_take():
    assert reference_peak(ROOF, "int8") == ("int8-vnni-avx512", 400e9)
    assert reference_peak(ROOF, "bf16") == ("bf16-dot-avx512", 200e9)
    assert reference_peak(Roofline("x", 1, 1, 1.0, {}), "int8") is None


def test_a_level_becomes_shares_of_bandwidth_and_peak():
    cost = WeightCost(bytes_per_step=100_000_000, macs_per_token=1_000_000_000, products="int8")
    row = {"itl_ms": {"p50": 10.0}, "total_tok_s": 80.0, "output_tok_s": 40.0}
    shares = serving_fractions(row, cost, ROOF)
    assert shares["bandwidth_share"] == pytest.approx(100e6 / 0.010 / 20e9)  # 10 GB/s of 20
    assert shares["peak_share"] == pytest.approx(80 * 1e9 / 400e9)
    assert shares["peak"] == "int8-vnni-avx512"
    empty = serving_fractions({"itl_ms": {"p50": None}, "output_tok_s": 0.0}, cost, ROOF)
    assert empty == {"bandwidth_share": None, "peak_share": None, "peak": None}


def test_the_command_measures_prints_and_writes_what_serving_reads(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = tmp_path / "roofline.json"
    args = parser.parse_args(
        ["--buffer-mib", "16", "--seconds", "0.01", "--json", str(out), "--threads", "1"]
    )
    assert run(args) == 0
    printed = capsys.readouterr().out
    assert "read bandwidth:" in printed and "G/s" in printed
    measured = Roofline.from_json(json.loads(out.read_text()))
    assert measured.threads == 1 and measured.read_bytes_per_s > 0
    assert set(measured.peaks) == set(native.load().roofline_peaks())
    assert all(v > 0 for v in measured.peaks.values())

    row = {
        "server": "ours", "level_label": "C=1", "num_ok": 8, "num_requests": 8, "output_tok_s": 100.0,
        "total_tok_s": 300.0, "req_s": 1.0, "ttft_ms": {"p50": 50.0, "p90": 60.0, "p99": 70.0},
        "itl_ms": {"p50": 8.0, "p90": 9.0, "p99": 10.0}, "e2e_ms": {"p50": 1.0, "p90": 1.0, "p99": 1.0},
    }  # fmt: skip
    report = {"results": [row], "servers": [{"name": "ours"}]}
    add_roofline(report, str(out), default_gguf())
    assert report["roofline"]["macs_per_token"] == weight_cost(default_gguf()).macs_per_token
    assert row["bandwidth_share"] > 0 and row["peak_share"] > 0
    assert "BW %" in report_mod.format_table(report)
    assert "share of read bandwidth" in report_mod.format_markdown(report)
