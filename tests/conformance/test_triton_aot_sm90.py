"""The attention kernels compiled ahead of time for an H100 (sm_90) on this machine, without a GPU: every
variant serving launches (decode with 1 and 16 splits and its reduce, prefill, KV write) for every head size
the backend conformance suite covers, plus 128 and the largest (256), in every dtype the Triton attention
takes, fits the H100's 227 KB of shared memory per program; in bfloat16 and float16 none spills registers.
The registers and spills of each are printed (`pytest -s`); float32 spills are reported, not refused (its
`tl.dot` runs in IEEE float32 on the CUDA cores). Triton's own compiler and `ptxas` do the work
(`tgi.backends.triton_common.aot`), in a child process because this session's kernels are interpreted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install triton; CI installs it)")

from tgi.backends.triton_common.aot import H100_SHARED_MEMORY_BYTES
from tgi.backends.triton_common.attention import MAX_HEAD_DIM, TritonAttention
from tgi.core.torch.testing.conformance import ATTENTION_CASES

HEAD_DIMS = sorted({case.head_dim for case in ATTENTION_CASES.values()} | {128, MAX_HEAD_DIM})
DTYPES = TritonAttention().caps().dtypes

# a compile needs Triton's NVIDIA backend and the ptxas it ships: say which is missing, if one is
_PROBE = """
from triton.backends.nvidia.compiler import get_ptxas
import subprocess
subprocess.run([get_ptxas(90).path, "--version"], check=True, capture_output=True)
"""
_COMPILE = """
import json, sys, torch
from concurrent.futures import ProcessPoolExecutor
from tgi.backends.triton_common.aot import attention_variants, compile_variant

variants = attention_variants(tuple(json.loads(sys.argv[1])), tuple(getattr(torch, d) for d in json.loads(sys.argv[2])),
                              num_splits=(1, 16))
with ProcessPoolExecutor(max_workers=2) as pool:
    for report in pool.map(compile_variant, variants):
        v = report.variant
        print(json.dumps({"line": report.line(), "dtype": str(v.dtype).removeprefix("torch."), "head_dim": v.head_dim,
                          "shared": report.shared_bytes, "spills": report.spill_bytes}), flush=True)
"""


def _child(code: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compile, not interpret
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_every_variant_fits_an_h100_and_half_precision_does_not_spill():
    probe = _child(_PROBE, timeout=120)
    if probe.returncode:
        pytest.skip(
            f"this triton build cannot compile for CUDA here: {probe.stderr.strip().splitlines()[-1]}"
        )
    run = _child(_COMPILE, json.dumps(HEAD_DIMS), json.dumps(list(DTYPES)), timeout=540)
    assert run.returncode == 0, run.stderr[-4000:]
    reports = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    print("\n".join(r["line"] for r in reports))
    assert {(r["head_dim"], r["dtype"]) for r in reports} == {(d, t) for d in HEAD_DIMS for t in DTYPES}
    too_big = [r["line"] for r in reports if r["shared"] > H100_SHARED_MEMORY_BYTES]
    assert not too_big, "over the H100's shared memory:\n" + "\n".join(too_big)
    spilling = [r["line"] for r in reports if r["spills"] and r["dtype"] != "float32"]
    assert not spilling, "spills registers:\n" + "\n".join(spilling)
