"""The GPU plan's scripts (src/tgi/benchmarks/gpu/) run end to end in their dry mode on the CPU: each exits 0 and
writes the summary, with the fields, that the real call writes on the GPU (the figures mean nothing here).
About a minute: each model pass starts an engine on a 2-layer model in Triton's interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install triton; CI installs it)")

PLAN = Path(__file__).resolve().parents[3] / "src" / "tgi" / "benchmarks" / "gpu"


def _dry_run(script: str, out: Path, timeout: float = 120) -> dict:
    env = dict(os.environ, TGI_GPU_DRY_RUN="1", OUT=str(out))
    run = subprocess.run(
        [sys.executable, str(PLAN / script)], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((out / script.replace(".py", ".json")).read_text())
    assert summary["dry_run"] is True
    return summary


def test_environment_check(tmp_path):
    summary = _dry_run("env_check.py", tmp_path)
    assert summary["needed"]["torch"] and summary["needed"]["triton"] and summary["missing_needed"] == []
    assert summary["gpu"] is None and summary["cuda_backend_probe"]["available"] is False


def test_kernel_smoke_reports_each_case_and_the_compiled_resources(tmp_path):
    summary = _dry_run("kernel_smoke.py", tmp_path)
    assert len(summary["cases"]) == 2 and all(case["passed"] for case in summary["cases"])
    assert summary["failed"] == []
    if summary["compiles"]:  # this triton can compile for sm_90 here
        assert {"shared", "registers", "spills"} <= set(summary["compiles"][0])


def test_conformance_runs_pytest_and_summarises_its_junit_report(tmp_path):
    summary = _dry_run("conformance.py", tmp_path)
    assert summary["passed"] >= 3 and summary["failed"] == [] and summary["returncode"] == 0
    assert (tmp_path / "conformance.xml").exists() and (tmp_path / "conformance.log").exists()


def test_model_bench_eager_and_graphs_passes(tmp_path):
    summary = _dry_run("model_bench.py", tmp_path, timeout=180)
    for name in ("model_bench_eager", "model_bench_graphs"):
        figures = summary[name]
        assert figures["returncode"] == 0 and figures["tgi_batch1_decode_tokens_per_s"] > 0
        assert figures["tgi_throughput_output_tokens_per_s"] > 0 and figures["weight_bytes_read_per_step"] > 0
        assert "tgi_batch1_fraction_of_ceiling" in figures  # None: no bandwidth is known for a CPU
    assert summary["model_bench_eager"]["transformers_throughput_output_tokens_per_s"] > 0
    full = json.loads((tmp_path / "model_bench_eager.json").read_text())
    # the roofline's bytes leave out the input embedding table (the dry model's head is not tied to it)
    assert full["weight_bytes_read_per_step"] < full["weight_bytes"]


def test_step_profile_reports_latency_kernels_and_busy_fraction(tmp_path):
    summary = _dry_run("step_profile.py", tmp_path, timeout=180)
    for name in ("step_profile_eager", "step_profile_graphs"):
        figures = summary[name]
        assert figures["step_concurrency"] == 4 and figures["step_rows_per_step"] == 4
        assert figures["step_latency_ms_p50"] > 0
        assert figures["step_kernels_per_step"] is not None and figures["step_gpu_busy_fraction"] is not None
    assert "step_kernel_table" in json.loads((tmp_path / "step_profile_eager.json").read_text())
