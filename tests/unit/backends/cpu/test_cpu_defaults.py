"""The CPU backend's defaults follow the CPU at hand: bfloat16 where it is computed natively."""

from __future__ import annotations

import dataclasses

import pytest

from tgi.backends.cpu import backend as cpu_backend
from tgi.backends.cpu.cpuinfo import cpu_info


@pytest.mark.parametrize(
    ("flags", "dtype", "why"),
    [
        ({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}, "bfloat16", "AMX"),
        ({"avx2", "avx512f", "avx512_bf16"}, "bfloat16", "AVX512-BF16"),
        ({"avx2", "avx512f"}, "float32", "would be emulated"),
        ({"avx2"}, "float32", "would be emulated"),
    ],
)
def test_default_dtype_is_bfloat16_where_the_cpu_computes_it(monkeypatch, flags, dtype, why):
    info = dataclasses.replace(cpu_info(), flags=frozenset(flags))
    monkeypatch.setattr(cpu_backend, "cpu_info", lambda: info)
    backend = cpu_backend.CpuBackend()
    assert backend.default_dtype() == dtype
    assert why in backend.default_dtype_reason()


AMX = {"avx2", "fma", "bmi1", "bmi2", "f16c", "movbe", "avx512f", "avx512bw", "avx512cd", "avx512dq",
       "avx512vl", "avx512_bf16", "amx_bf16", "amx_tile"}  # fmt: skip
EPYC = AMX - {"amx_bf16", "amx_tile"}
AVX2 = {"avx2", "fma", "bmi1", "bmi2", "f16c", "movbe"}


@pytest.mark.parametrize(
    ("flags", "impls", "rows", "expected"),
    [
        (AMX, ["reference", "avx512-bf16", "amx"], 64, {
            "dense linear": "oneDNN bfloat16 (AMX)",
            "gguf block linear": "avx512-bf16 for 1-2 rows, amx up to 64 rows",
            "decode attention": "cpu-native, scores on AMX (head sizes 32-128), else AVX-512",
            "fused norm/rotary/silu": "native AVX-512",
        }),
        (AMX | {"avx512_vnni", "avx512vbmi"}, ["reference", "avx512-bf16", "amx", "avx512-vnni"], 64, {
            "gguf block linear": "avx512-bf16 for 1-2 rows, amx up to 64 rows; K-quants on int8 inputs (avx512-vnni)",
        }),
        (EPYC | {"avx512_vnni", "avx512vbmi"}, ["reference", "avx512-bf16", "avx512-vnni"], 64, {
            "gguf block linear": "avx512-bf16 up to 64 rows; K-quants on int8 inputs (avx512-vnni) for every "
            "row count (no dense copy)",
        }),
        (EPYC, ["reference", "avx512-bf16"], 64, {
            "dense linear": "oneDNN bfloat16 (AVX512-BF16)",
            "gguf block linear": "avx512-bf16 up to 64 rows",
            "decode attention": "cpu-native AVX-512",
            "greedy pick": "native AVX-512",
        }),
        (AVX2, ["reference"], 0, {
            "gguf block linear": "off (no fast path on this CPU)",
            "decode attention": "cpu-native AVX2",
            "fused norm/rotary/silu": "native AVX2",
        }),
    ],
)  # fmt: skip
def test_the_kernel_plan_follows_the_cpu(flags, impls, rows, expected, monkeypatch):
    from tgi.backends.cpu.kernel_plan import kernel_plan

    for name in ("TGI_CPU_FUSED", "TGI_CPU_BLOCK_KERNELS", "TGI_CPU_BLOCK_IMPL", "TGI_CPU_DECODE_IMPL"):
        monkeypatch.delenv(name, raising=False)
    info = dataclasses.replace(cpu_info(), flags=frozenset(flags))
    plan = kernel_plan(info, "bfloat16", "cpu-native", True, impls, rows)
    assert {k: plan[k] for k in expected} == expected
    assert kernel_plan(info, "float32", "cpu-native", True, impls, rows)["gguf block linear"] == (
        "off (dense weights)"
    )
    monkeypatch.setenv("TGI_CPU_FUSED", "0")
    assert (
        kernel_plan(info, "bfloat16", "cpu-sdpa", True, impls, rows)["fused norm/rotary/silu"] == "torch ops"
    )
    assert (
        kernel_plan(info, "bfloat16", "cpu-sdpa", False, impls, rows)["decode attention"]
        == "cpu-sdpa (torch)"
    )


def test_this_machines_plan_is_reported():
    backend = cpu_backend.CpuBackend()
    plan = backend.describe_kernels(backend.default_dtype())
    assert set(plan) == {
        "dense linear", "gguf block linear", "decode attention", "fused norm/rotary/silu", "greedy pick",
        "threads", "lora",
    }  # fmt: skip
    assert all(plan.values())


def test_block_rows_follow_the_cpu(monkeypatch):
    from tgi.backends.cpu.linear import max_block_rows

    monkeypatch.delenv("TGI_CPU_BLOCK_ROWS", raising=False)
    assert max_block_rows(["reference", "avx512-bf16", "amx"]) == 64
    assert max_block_rows(["reference", "avx512-bf16"]) == 64  # oneDNN's dense products have no AMX either
    assert max_block_rows(["reference"]) == 0
    monkeypatch.setenv("TGI_CPU_BLOCK_ROWS", "8")
    assert max_block_rows(["reference", "avx512-bf16"]) == 8


@pytest.mark.parametrize(
    ("cores", "env", "small", "big"),
    [
        (2, {}, 1, 2),
        (8, {}, 7, 8),
        (1, {}, 1, 1),
        (2, {"OMP_NUM_THREADS": "2"}, 2, 2),
        (2, {"TGI_CPU_SMALL_STEP_TOKENS": "0"}, 2, 2),
        (2, {"TGI_CPU_STEP_THREADS": "all"}, 2, 2),
    ],
)
def test_small_steps_leave_a_core_to_the_server(monkeypatch, cores, env, small, big):
    """The fixed rule (`TGI_CPU_STEP_THREADS=fewer`) for steps of at most 8 tokens."""
    import torch

    for name in ("OMP_NUM_THREADS", "TGI_CPU_SMALL_STEP_TOKENS", "TGI_CPU_STEP_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TGI_CPU_STEP_THREADS", "fewer")
    monkeypatch.setenv("TGI_CPU_SMALL_STEP_TOKENS", "8")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    info = dataclasses.replace(cpu_info(), cores=cores)
    monkeypatch.setattr(cpu_backend, "cpu_info", lambda: info)
    before = torch.get_num_threads()
    try:
        backend = cpu_backend.CpuBackend()
        assert backend.step_threads(1) == big  # offline: nothing else wants the cores
        backend.serve_beside_event_loop()
        assert (backend.step_threads(1), backend.step_threads(8)) == (small, small)
        assert (backend.step_threads(9), backend.step_threads(2048)) == (big, big)
        backend.begin_step(1)
        assert torch.get_num_threads() == small
        backend.begin_step(512)
        assert torch.get_num_threads() == big
    finally:
        torch.set_num_threads(before)
