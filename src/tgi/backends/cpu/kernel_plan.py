"""Which implementation each CPU kernel takes on this machine, decided from the CPU's features (as the native
code's own dispatch decides, once per process) and the switches: reported at start-up, by `tgi backends` and
in `/info`, so that a figure can always be tied to the code that produced it."""

from __future__ import annotations

import os

from tgi.backends.cpu.cpuinfo import CpuInfo

#: x86-64-v4 (the fused ops' and the paged decode's AVX-512 clone) and x86-64-v3 (their AVX2 clone)
_V4 = frozenset({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"})
_V3 = frozenset({"avx2", "fma", "bmi1", "bmi2", "f16c", "movbe"})


def vector_isa(info: CpuInfo) -> str:
    """The widest instruction set the native elementwise code runs with here."""
    if info.flags >= _V4:
        return "AVX-512"
    if info.flags >= _V3:
        return "AVX2"
    return "scalar"


def kernel_plan(
    info: CpuInfo,
    dtype: str,
    attention: str,
    native: bool,
    block_impls: list[str],
    max_block_rows: int,
    blocks: bool | None = None,
) -> dict[str, str]:
    """kernel -> the implementation it uses for a model in `dtype` with attention `attention`; `native`: the
    native kernels built here; `block_impls`/`max_block_rows`: what the block linear offers and takes;
    `blocks`: whether a model in `dtype` computes with the GGUF blocks (default: bfloat16 only)."""
    isa = vector_isa(info)
    fused = native and os.environ.get("TGI_CPU_FUSED", "1") != "0"
    plan: dict[str, str] = {}
    if dtype == "bfloat16":
        engine = "AMX" if info.has_amx_bf16 else "AVX512-BF16" if info.has_avx512_bf16 else "emulated"
        plan["dense linear"] = f"oneDNN bfloat16 ({engine})"
    else:
        plan["dense linear"] = f"float32 GEMM ({isa})"
    impl = os.environ.get("TGI_CPU_BLOCK_IMPL", "auto")
    blocks = dtype == "bfloat16" if blocks is None else blocks
    if not blocks or not native or os.environ.get("TGI_CPU_BLOCK_KERNELS", "1") == "0":
        plan["gguf block linear"] = "off (dense weights)"
    elif dtype == "float32" and impl != "auto":
        plan["gguf block linear"] = f"{impl} up to {max_block_rows} rows (TGI_CPU_BLOCK_IMPL)"
    elif dtype == "float32":
        avx2 = "AVX2" if {"avx2", "fma", "f16c"} <= info.flags else "scalar"
        plan["gguf block linear"] = f"float32 {avx2} up to {max_block_rows} rows"
        if "avx2-int8" in block_impls and "avx512-vnni" not in block_impls:
            from tgi.backends.cpu.linear import max_block_rows_f32

            rows = max_block_rows_f32(block_impls, "Q4_K", info.flags)
            limit = "for every row count (no dense copy)" if rows is None else f"up to {rows} rows"
            plan["gguf block linear"] += f"; K-quants on int8 inputs (avx2-int8) {limit}"
    elif max_block_rows <= 0:
        plan["gguf block linear"] = "off (no fast path on this CPU)"
    elif impl != "auto":
        plan["gguf block linear"] = f"{impl} up to {max_block_rows} rows (TGI_CPU_BLOCK_IMPL)"
    else:
        from tgi.backends.cpu.linear import k_int8_every_row

        int8 = "; K-quants on int8 inputs (avx512-vnni)" if "avx512-vnni" in block_impls else ""
        if int8 and k_int8_every_row(block_impls):
            int8 += " for every row count (no dense copy)"
        if "amx" in block_impls:
            plan["gguf block linear"] = f"avx512-bf16 for 1-2 rows, amx up to {max_block_rows} rows{int8}"
        else:
            bf16 = [i for i in block_impls if i not in ("avx512-vnni", "avx2-int8")][-1]
            plan["gguf block linear"] = f"{bf16} up to {max_block_rows} rows{int8}"
    if attention == "cpu-native":
        decode = os.environ.get("TGI_CPU_DECODE_IMPL", "auto")
        if decode != "auto":
            plan["decode attention"] = f"cpu-native {decode} (TGI_CPU_DECODE_IMPL)"
        elif info.has_amx_bf16 and dtype == "bfloat16":
            plan["decode attention"] = f"cpu-native, scores on AMX (head sizes 32-128), else {isa}"
        else:
            plan["decode attention"] = f"cpu-native {isa}"
    else:
        plan["decode attention"] = f"{attention} (torch)"
    plan["fused norm/rotary/silu"] = f"native {isa}" if fused else "torch ops"
    plan["greedy pick"] = f"native {isa}" if fused else "torch ops"
    return plan
