"""Helpers shared by the kernels: interpreter detection, block-size choices, in-kernel math."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from tgi.backends.triton_common import interpreter_calls


def interpreting() -> bool:
    """True when triton runs kernels in its numpy interpreter (`TRITON_INTERPRET=1`), i.e. on CPU tensors."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0", "false", "False")


# a helper's call inside an interpreted kernel skips triton's re-patching (the module says why)
if interpreting():
    interpreter_calls.install()


def upcast_dot(dtype: torch.dtype) -> bool:
    """Whether `tl.dot` must run on float32 operands.

    float32 inputs: yes, with IEEE precision (the default TF32 would lose ~3 digits). bfloat16 under the
    interpreter: yes, because the interpreter keeps bfloat16 as raw uint16 bits and its `tl.dot` multiplies
    the bit patterns (triton-lang/triton#11584). On a GPU bfloat16/float16 run on the tensor cores.
    """
    return dtype == torch.float32 or (dtype == torch.bfloat16 and interpreting())


#: shared memory one program may hold on an H100 (227 KB of the SM's 228 KB): the budget where no GPU is
#: asked (the interpreter, ahead-of-time compiles for sm_90)
SHARED_MEMORY_BYTES = 227 * 1024
XPU_SHARED_MEMORY_BYTES = 64 * 1024
_SHARED_MEMORY: dict[int, int] = {}


def shared_memory_budget(device: torch.device) -> int:
    """Shared memory (LDS on AMD) one program may hold on `device`, as its driver says (64 KB on an MI300,
    227 KB on an H100); 64 KB on an Intel GPU (the shared local memory of the smallest Xe core, not asked:
    unverified); `SHARED_MEMORY_BYTES` for the interpreter's CPU tensors."""
    if device.type == "xpu":
        return XPU_SHARED_MEMORY_BYTES
    if device.type != "cuda" or interpreting():
        return SHARED_MEMORY_BYTES
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SHARED_MEMORY:
        props = triton.runtime.driver.active.utils.get_device_properties(index)
        _SHARED_MEMORY[index] = int(props["max_shared_mem"])
    return _SHARED_MEMORY[index]


#: (row + key) tile elements, counted twice in float32, from which a program runs on 8 warps: the tiles'
#: gathered addresses and values live in registers, and 4 warps spill them (ptxas -v, sm_90)
EIGHT_WARPS_ELEMENTS = 8192


def block_n_for(head_dim: int) -> int:
    """Keys per tile: 64, fewer for heads over 128 so that a key tile stays within 8192 elements."""
    return max(16, min(64, 8192 // block_d(head_dim)))


def tile_launch_options(
    rows: int, block_n: int, head_dim: int, element_bytes: int, budget: int = SHARED_MEMORY_BYTES
) -> dict[str, int]:
    """`num_warps` and `num_stages` of an attention kernel whose program holds `rows` query rows and walks
    its keys in tiles of `block_n` (keys and values of `element_bytes`): as many pipeline stages (at most
    Triton's default of 3) as one key and one value tile fit in half of `budget` (the other half for the dot
    operands' layout conversions), at least 1; 8 warps from `EIGHT_WARPS_ELEMENTS`. Checked for sm_90 by
    compiling every variant ahead of time (`tgi.backends.triton_common.aot`)."""
    width = block_d(head_dim)
    stage_bytes = 2 * block_n * width * element_bytes
    stages = max(1, min(3, (budget // 2) // stage_bytes))
    elements = (rows + block_n) * width * (2 if element_bytes >= 4 else 1)
    return {"num_warps": 8 if elements >= EIGHT_WARPS_ELEMENTS else 4, "num_stages": stages}


def block_d(head_dim: int) -> int:
    """Head dimension padded to a power of two of at least 16 (the smallest `tl.dot` operand)."""
    return max(16, triton.next_power_of_2(head_dim))


@triton.jit
def softcap_fn(s, softcap):
    """softcap * tanh(s / softcap), with tanh from exp (no libdevice: it also runs in the interpreter).
    tanh(x) = 1 - 2 / (exp(2x) + 1) saturates cleanly to +-1 for large |x|."""
    x = s / softcap
    return softcap * (1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0))


@triton.jit
def qk_dot(q, k, UPCAST: tl.constexpr):
    """q [M, D] . k [N, D]^T -> [M, N] float32."""
    if UPCAST:
        s = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    return s


@triton.jit
def pv_dot(p, v, UPCAST: tl.constexpr):
    """p [M, N] float32 . v [N, D] -> [M, D] float32 (p in v's dtype on the tensor cores)."""
    if UPCAST:
        o = tl.dot(p, v.to(tl.float32), input_precision="ieee")
    else:
        o = tl.dot(p.to(v.dtype), v)
    return o
