"""Ahead-of-time compiles of the attention kernels for a GPU that is not here: shared memory, registers and
spills of every variant, for sm_90 (H100) by default.

Triton's compiler and the `ptxas` it ships run without a GPU when given a target
(`triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 64))`), so the variants serving would launch
(`decode_constexprs`, `prefill_constexprs`, ... with the launch options the wrappers choose) are compiled
exactly as on the device, and `ptxas -v` reports their registers and spills. Run it with triton imported
without `TRITON_INTERPRET=1` (the interpreter replaces the kernels): `python -m tgi.backends.triton_common.aot`
prints one line per variant.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

import torch

#: the shared memory per program of an H100 (sm_90)
H100_SHARED_MEMORY_BYTES = 227 * 1024
_TRITON_TYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


@dataclass(frozen=True)
class KernelVariant:
    """One compiled variant of a kernel: its constexprs and launch options, for one (head size, dtype)."""

    kernel: str  # the kernel's name in its module ("_decode_split_kernel")
    head_dim: int
    dtype: torch.dtype
    signature: dict  # argument name -> Triton type ("*bf16", "i32", "constexpr")
    constexprs: dict  # argument name -> value
    options: dict  # num_warps, num_stages


@dataclass(frozen=True)
class CompileReport:
    """What the compiler says of one variant."""

    variant: KernelVariant
    shared_bytes: int  # shared memory one program allocates
    registers: int  # per thread, from ptxas -v
    spill_bytes: int  # spill stores + spill loads, from ptxas -v

    def line(self) -> str:
        v = self.variant
        dtype = _TRITON_TYPES[v.dtype]
        return (
            f"{v.kernel} d={v.head_dim} {dtype} splits={v.constexprs.get('NUM_SPLITS', '-')} "
            f"warps={v.options['num_warps']} stages={v.options['num_stages']}: shared {self.shared_bytes} B, "
            f"{self.registers} registers, {self.spill_bytes} B spilled"
        )


def _signature(kernel, constexprs: dict, dtype: torch.dtype, pointer_types: dict) -> dict:
    """Pointers are the capitalised arguments (in `dtype` unless `pointer_types` says otherwise), `scale` and
    `softcap` float32, every other argument an int32."""
    signature = {}
    for name in kernel.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name[0].isupper():
            signature[name] = pointer_types.get(name, "*" + _TRITON_TYPES[dtype])
        elif name in ("scale", "softcap"):
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
    return signature


def attention_variants(
    head_dims: tuple[int, ...],
    dtypes: tuple[torch.dtype, ...],
    num_splits: tuple[int, ...] = (2,),
    num_heads: int = 8,
    num_kv_heads: int = 2,
    page: int = 16,
    budget: int = H100_SHARED_MEMORY_BYTES,
) -> list[KernelVariant]:
    """The decode (per split count, with its reduce), prefill and KV-write variants of a model with these
    head sizes and dtypes, with the constexprs and launch options serving picks on a GPU with `budget`
    bytes of shared memory (window and soft-cap off: they add no tile)."""
    from tgi.backends.triton_common.kernels import decode, prefill
    from tgi.backends.triton_common.kernels.reshape_and_cache import _reshape_and_cache_kernel

    i32, f32 = "*i32", "*fp32"
    variants = []
    for d in head_dims:
        for dtype in dtypes:
            for splits in num_splits:
                c = decode.decode_constexprs(num_heads, num_kv_heads, d, page, dtype, splits, None, None)
                types = {"Block_tables": i32, "Seq_lens": i32, "Out_partial": f32, "Lse_partial": f32}
                types.update(K_scale=f32, V_scale=f32)
                options = decode.decode_launch_options(c, dtype, budget)
                sig = _signature(decode._decode_split_kernel, c, dtype, types)
                variants.append(KernelVariant("_decode_split_kernel", d, dtype, sig, c, options))
                if splits > 1:
                    c = decode.reduce_constexprs(num_heads, d, splits)
                    types = {"Out_partial": f32, "Lse_partial": f32}
                    sig = _signature(decode._decode_reduce_kernel, c, dtype, types)
                    options = {"num_warps": 4, "num_stages": 3}  # Triton's defaults: the wrapper sets none
                    variants.append(KernelVariant("_decode_reduce_kernel", d, dtype, sig, c, options))
            c = prefill.prefill_constexprs(num_heads, num_kv_heads, d, page, dtype, None, None)
            types = {"Block_tables": i32, "Query_start": i32, "Seq_lens": i32, "K_scale": f32, "V_scale": f32}
            sig = _signature(prefill._prefill_kernel, c, dtype, types)
            options = prefill.prefill_launch_options(c, dtype, budget)
            variants.append(KernelVariant("_prefill_kernel", d, dtype, sig, c, options))
            block_hd = 1 << (num_kv_heads * d - 1).bit_length()
            c = dict(
                PAGE=page,
                NUM_HEADS=num_kv_heads,
                HEAD_DIM=d,
                BLOCK_T=max(1, 2048 // block_hd),
                BLOCK_HD=block_hd,
            )
            sig = _signature(_reshape_and_cache_kernel, c, dtype, {"Slots": "*i64"})
            options = {"num_warps": 4, "num_stages": 3}
            variants.append(KernelVariant("_reshape_and_cache_kernel", d, dtype, sig, c, options))
    return variants


def _kernel(name: str):
    import importlib

    for module in ("decode", "prefill", "reshape_and_cache"):
        module = importlib.import_module(f"tgi.backends.triton_common.kernels.{module}")
        if hasattr(module, name):
            return getattr(module, name)
    raise KeyError(name)


def _ptxas_usage(ptx: str, capability: int, arch: str) -> tuple[int, int]:
    """(registers, spill bytes) of the kernel in `ptx`, from the `ptxas -v` that Triton ships."""
    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.TemporaryDirectory() as folder:
        src = os.path.join(folder, "kernel.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        cmd = [
            get_ptxas(capability).path,
            "-v",
            f"--gpu-name={arch}",
            src,
            "-o",
            os.path.join(folder, "k.cubin"),
        ]
        log = subprocess.run(cmd, check=True, capture_output=True, text=True).stderr
    registers = int(m.group(1)) if (m := re.search(r"Used (\d+) registers", log)) else 0
    spills = sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log))
    return registers, spills


def compile_variant(variant: KernelVariant, capability: int = 90, warp_size: int = 32) -> CompileReport:
    """Compile `variant` for CUDA compute capability `capability` (no GPU needed); raises what Triton raises
    (e.g. `OutOfResources` when the variant needs more shared memory than the target has)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = _kernel(variant.kernel)
    if type(kernel).__name__ != "JITFunction":
        raise RuntimeError("the kernels are interpreted (TRITON_INTERPRET=1): nothing to compile")
    source = ASTSource(fn=kernel, signature=variant.signature, constexprs=variant.constexprs)
    compiled = triton.compile(
        source, target=GPUTarget("cuda", capability, warp_size), options=variant.options
    )
    from triton.backends.nvidia.compiler import sm_arch_from_capability

    arch = sm_arch_from_capability(capability)
    registers, spills = _ptxas_usage(compiled.asm["ptx"], capability, arch)
    return CompileReport(variant, int(compiled.metadata.shared), registers, spills)


def main() -> None:
    dtypes = (torch.float32, torch.bfloat16, torch.float16)
    for variant in attention_variants((32, 64, 80, 128, 256), dtypes, num_splits=(1, 16)):
        print(compile_variant(variant).line(), flush=True)


if __name__ == "__main__":
    main()
